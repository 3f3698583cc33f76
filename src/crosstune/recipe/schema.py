"""The recipe: one YAML file that drives data, both training backends, serving, evaluation and cost.

Every section forbids unknown keys, so a typo is an error with its YAML path rather than a silent default; values
are strict (no "1" for an int, no 2.0 for an int, no true for a string) and finite; a recipe name is one safe path
component (it names <output_dir>/<name>-<backend> and <output_dir>/data/<name>).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from crosstune import hub
from crosstune.errors import BatchPlanError
from crosstune.families.spec import NEUTRAL_TARGETS
from crosstune.hardware import AUTO, HARDWARE
from crosstune.recipe.backend_schema import (  # noqa: F401 - the backend section's classes, re-exported here
    BACKEND_NAMES,
    BackendName,
    BackendSection,
    JaxBackendSection,
    JaxMesh,
    TorchBackendSection,
)
from crosstune.recipe.data_schema import (  # noqa: F401 - the data section's classes, re-exported here
    ColumnMapping,
    DataSection,
    DataSource,
    Subsample,
    SystemPromptPolicy,
    hub_checked,
)
from crosstune.recipe.section import Section, bounded, each

Target = Literal["q", "k", "v", "o", "gate", "up", "down", "experts"]  # experts: refused by name (recipe/checks.py)
SAFE_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")  # \Z: "$" also matches before a final newline
RESOLVED = "resolved"  # validation context of a run's recipe.yaml (every default written): no user-key checks


def _written_by_user(info: ValidationInfo) -> bool:
    return not (info.context or {}).get(RESOLVED)


class ModelSection(Section):
    omitted_when_none = ("revision",)
    family: Literal["gemma3", "gemma4"]
    path: str | None = Field(
        None,
        description="HF model directory (config.json + safetensors), or a hub id written "
        "hf://OWNER/NAME (hf://google/gemma-4-31B-it) resolved through the hub cache (crosstune.hub)",
    )
    revision: str | None = Field(None, description="the hub revision (branch, tag or commit) of a hub-id model.path")

    _path = field_validator("path")(lambda cls, v: hub_checked(v, hub.hub_id))
    _revision = field_validator("revision")(lambda cls, v: hub_checked(v, hub.check_revision))
    size: str | None = Field(None, description="a known size (e.g. 31b, 27b, tiny) for planning without a checkpoint")
    dtype: Literal["float32", "bfloat16"] = "bfloat16"
    random_init: bool = Field(
        False,
        description="benchmarks only: build the model from model.path/config.json with random weights "
        "(no weights are read; the torch backend builds it on the GPU)",
    )

    @model_validator(mode="after")
    def _path_or_size(self) -> ModelSection:
        if self.path is None and self.size is None:
            raise ValueError("give model.path (a checkpoint directory) or model.size (a known spec such as 31b)")
        return self


class LoraSection(Section):
    rank: int = bounded("lora.rank", 16)
    alpha: float = bounded("lora.alpha", 16.0)
    dropout: float = bounded("lora.dropout", 0.0)
    targets: list[Target] = Field(default_factory=lambda: list(NEUTRAL_TARGETS), min_length=1)


class KernelsSection(Section):
    """Fast paths of the torch backend, each switchable so one run can show its effect; the defaults are the plain
    library paths (docs/BENCHMARKS.md)."""

    attention: Literal["sdpa", "eager", "flex"] = Field(
        "sdpa", description="flex: FlexAttention with a document + causal/sliding BlockMask per layer type (CUDA)"
    )
    loss: Literal["trl", "cce"] = Field(
        "trl",
        description="trl: TRL's chunked fused LM head; cce: cut-cross-entropy's fused linear + "
        "cross-entropy kernel, gradient filtering off (exact; CUDA, needs the cut-cross-entropy package)",
    )
    token_metrics: bool = Field(
        True,
        description="TRL's per-step entropy and mean_token_accuracy (extra vocabulary work and host syncs "
        "every micro-batch); false computes the loss alone",
    )
    lora_input_cast: bool = Field(
        True,
        description="PEFT casts every LoRA layer's input to the adapter weights' fp32, and under bf16 autocast "
        "the LoRA matmul casts it straight back to bf16: two activation-sized copies per LoRA module and pass. false "
        "feeds the bf16 activation as is (peft.helpers.disable_input_dtype_casting): the same numbers, the LoRA "
        "weights stay fp32 (the optimizer's master copy). Needs train.precision bf16",
    )
    compile: bool = Field(
        False,
        description="torch.compile each decoder layer in place (nn.Module.compile: names, checkpointing and "
        "the FSDP2 wrap unit stay per layer); the first steps pay the compilation",
    )
    recompute: Literal["full", "selective", "dots", "dots_and_attention"] = Field(
        "full",
        description="what train.gradient_checkpointing recomputes in the backward: full = every op of each "
        "decoder layer; selective = TRL's selective activation checkpointing: the attention kernel's outputs are "
        "kept (one [tokens, heads × head_dim] tensor more per layer) and everything else is recomputed. Needs "
        "gradient_checkpointing true, attention sdpa, and not FSDP over several devices (torch only: the jax "
        "backend refuses it); dots = the outputs of every weight matmul (projections, MLP, LoRA) are kept and the "
        "norms, activations and attention recomputed (jax.checkpoint_policies.dots_with_no_batch_dims_saveable; "
        "jax only: the torch backend refuses it); dots_and_attention = dots, and the splash kernel's outputs kept "
        "too (its output and logsumexp: one [tokens, heads × head_dim] tensor and [heads, tokens] fp32 more per "
        "layer), so the backward does not run the attention's forward again: what an unrolled step without "
        "recompute keeps of a layer but its elementwise tensors (MaxText's minimal_with_context). jax with "
        "backend.jax.attention splash only",
    )

    @property
    def recomputes_attention(self) -> bool:  # hfu counts it; the planner keeps its outputs otherwise
        return self.recompute not in ("selective", "dots_and_attention")

    @property
    def recomputes_matmuls(self) -> bool:  # dots keeps every weight matmul's output
        return self.recompute not in ("dots", "dots_and_attention")

    @model_validator(mode="after")
    def _cce_has_no_metrics(self) -> KernelsSection:
        if self.loss == "cce" and self.token_metrics:
            raise ValueError("loss 'cce' gives no per-token entropy or accuracy: set train.kernels.token_metrics false")
        if self.recompute == "selective" and self.attention != "sdpa":
            raise ValueError(
                f"recompute 'selective' keeps the outputs of PyTorch's SDPA kernels; attention {self.attention!r} "
                "runs none, so it would recompute everything as 'full' does: use attention sdpa or recompute full"
            )
        return self


class TrainSection(Section):
    omitted_when_none = ("warmup_ratio",)
    epochs: float | None = bounded("train.epochs", 1.0)
    max_steps: int | None = bounded("train.max_steps", None)
    learning_rate: float = bounded("train.learning_rate", 1e-4)
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    warmup_steps: int = bounded("train.warmup_steps", 0)
    warmup_ratio: float | None = bounded(
        "train.warmup_ratio",
        None,
        description="warm-up as a fraction of the run's optimizer steps: ceil(ratio × "
        "steps) once the step plan knows them (transformers' rule; both backends, and both exports write it)",
    )
    weight_decay: float = bounded("train.weight_decay", 0.0)
    adam_beta1: float = bounded("train.adam_beta1", 0.9)
    adam_beta2: float = bounded("train.adam_beta2", 0.999)
    adam_eps: float = bounded("train.adam_eps", 1e-8)
    max_grad_norm: float | None = bounded("train.max_grad_norm", 1.0)
    per_device_batch_size: int = bounded("train.per_device_batch_size", 1)
    grad_accumulation: int = bounded("train.grad_accumulation", 1)
    # Rows per optimizer step over all devices. When set, each backend derives its accumulation from it (torch:
    # per GPU, jax: per fsdp shard) and grad_accumulation is ignored, so a recipe moves between backends unchanged.
    global_batch_size: int | None = bounded("train.global_batch_size", None)
    gradient_checkpointing: bool = True
    precision: Literal["fp32", "bf16"] = "bf16"
    log_every: int = bounded("train.log_every", 1)
    checkpoint_every: int = bounded("train.checkpoint_every", 100)
    keep_last: int = bounded("train.keep_last", 3)
    seed: int = bounded("train.seed", 42)
    kernels: KernelsSection = Field(default_factory=KernelsSection)

    @model_validator(mode="after")
    def _kernels_need(self) -> TrainSection:
        if self.kernels.recompute != "full" and not self.gradient_checkpointing:
            raise ValueError(
                f"kernels.recompute {self.kernels.recompute!r} chooses what gradient_checkpointing recomputes: set "
                "train.gradient_checkpointing true, or kernels.recompute full"
            )
        if not self.kernels.lora_input_cast and self.precision != "bf16":
            raise ValueError(
                "kernels.lora_input_cast false needs train.precision bf16 (under fp32 the LoRA input already has the "
                "weights' dtype: nothing to remove); set it true"
            )
        return self

    @model_validator(mode="after")
    def _one_setting_one_key(self, info: ValidationInfo) -> TrainSection:
        """Two keys for one setting: refused rather than one silently replacing the other."""
        if not _written_by_user(info):
            return self
        given = self.model_fields_set
        if "epochs" in given and self.epochs is not None and self.max_steps is not None:
            raise ValueError(
                f"epochs ({self.epochs:g}) and max_steps ({self.max_steps}) both set the run's length: keep one "
                "(a --set of one replaces the file's other)"
            )
        if "warmup_ratio" in given and self.warmup_ratio is not None and "warmup_steps" in given:
            raise ValueError(
                f"warmup_steps ({self.warmup_steps}) and warmup_ratio ({self.warmup_ratio:g}) both set the warm-up: "
                "keep one (a --set of one replaces the file's other)"
            )
        if self.epochs is None and self.max_steps is None:
            raise ValueError("the run has no length: give train.epochs or train.max_steps")
        if self.global_batch_size is not None and "grad_accumulation" in given:
            raise ValueError(
                f"global_batch_size ({self.global_batch_size}) derives the gradient accumulation per backend, so "
                f"grad_accumulation ({self.grad_accumulation}) would be ignored: keep one of them"
            )
        return self

    def accumulation(self, data_parallel: int) -> int:
        """Micro-batches per optimizer step on `data_parallel` devices: from global_batch_size when set, else
        grad_accumulation (the step plan's rule, crosstune.train.step_plan; an export writes it for the user's tool)."""
        if self.global_batch_size is None:
            return self.grad_accumulation
        micro = self.per_device_batch_size * data_parallel
        if self.global_batch_size % micro:
            raise BatchPlanError(
                f"train.global_batch_size={self.global_batch_size} is not a multiple of per_device_batch_size "
                f"{self.per_device_batch_size} × {data_parallel} data-parallel devices = {micro} rows: choose a "
                "multiple of it, or change train.per_device_batch_size"
            )
        return self.global_batch_size // micro

    @model_validator(mode="after")
    def _length(self) -> TrainSection:
        if self.max_steps is not None:
            self.epochs = None  # the default epochs gives way to max_steps; the resolved recipe says so
        return self


class ServeSection(Section):
    engine: Literal["vllm"] = "vllm"
    max_model_len: int = bounded("serve.max_model_len", 4096)
    tensor_parallel_size: int = bounded("serve.tensor_parallel_size", 1)
    gpu_memory_utilization: float = bounded("serve.gpu_memory_utilization", 0.9)
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    port: int = bounded("serve.port", 8000)
    contexts: list[each("serve.contexts", int)] = Field(default_factory=lambda: [1024, 2048, 4096])
    concurrency: list[each("serve.concurrency", int)] = Field(default_factory=lambda: [1, 4, 16])
    output_tokens: int = bounded("serve.output_tokens", 256)
    preset: str | None = Field(None, description="a named grid for the 3 above (`bench serve --preset`: seed)")


class EvalSection(Section):
    problems: str | None = Field(None, description="a VerilogEval v2 checkout or a problems.txt directory")
    samples: int = bounded("eval.samples", 5)
    k: list[each("eval.k", int)] = Field(default_factory=lambda: [1, 5])
    temperature: float = bounded("eval.temperature", 0.8)
    top_p: float = bounded("eval.top_p", 0.95)
    max_tokens: int = bounded("eval.max_tokens", 1024)
    prompt_style: Literal["verilogeval", "codev"] = "verilogeval"
    protocol: Literal["codev-r1", "codev-r1-card"] | None = Field(
        None, description="a named protocol (eval --protocol); lines written here win"
    )
    connect_timeout_s: float = bounded(
        "eval.connect_timeout_s",
        10.0,
        description="to open a connection to the endpoint; also bounds the reachability probe sent before the batch",
    )
    read_timeout_s: float = bounded(
        "eval.read_timeout_s",
        600.0,
        description="longest silence from the endpoint (a non-streamed answer arrives whole: it bounds a generation)",
    )
    request_timeout_s: float = bounded(
        "eval.request_timeout_s",
        1800.0,
        description="deadline for one request, connect to last byte, however slowly the server sends",
    )

    @model_validator(mode="after")
    def _k_le_n(self) -> EvalSection:
        too_big = [k for k in self.k if k > self.samples]
        if too_big:
            raise ValueError(f"pass@k needs k <= samples ({self.samples}); got k = {too_big}")
        return self


# The eval defaults' one owner (recipe is below evals): unwritten eval lines, `eval` alone, the cache key, Timeouts.
EVAL_DEFAULTS = EvalSection()


class CostSection(Section):
    price_per_hour: float | None = bounded(
        "cost.price_per_hour", None, description="override the catalog price of `hardware`"
    )
    currency: str = "USD"
    serve_hours_per_month: float = bounded("cost.serve_hours_per_month", 730.0)


class Recipe(Section):
    name: str = Field(min_length=1)
    description: str = ""
    output_dir: str = "runs"
    model: ModelSection
    lora: LoraSection = Field(default_factory=LoraSection)
    data: DataSection
    train: TrainSection = Field(default_factory=TrainSection)
    backend: BackendSection = Field(default_factory=BackendSection)
    hardware: str = "cpu"
    serve: ServeSection = Field(default_factory=ServeSection)
    eval: EvalSection = Field(default_factory=EvalSection)
    cost: CostSection = Field(default_factory=CostSection)
    # Where the recipe's relative paths resolve (its file's folder) and the load-time warnings: set by
    # crosstune.recipe.load (or `located`), never guessed from the cwd.
    _base_dir: Path | None = PrivateAttr(default=None)
    _warnings: list[Any] = PrivateAttr(default_factory=list)

    def located(self, base_dir: Path, warnings: list[Any] | None = None) -> Recipe:
        """This recipe with its relative paths resolving against `base_dir` (and the checks' warnings)."""
        self._base_dir = Path(base_dir)
        self._warnings = list(warnings or [])
        return self

    @property
    def base_dir(self) -> Path | None:
        """The folder relative paths resolve against; None for a recipe built without a file or `located`."""
        return self._base_dir

    @property
    def warnings(self) -> list[Any]:
        """The consistency checks' warnings (recipe.load.Problem) found when the recipe was loaded."""
        return list(self._warnings)

    @model_validator(mode="after")
    def _kept_attention_is_splash_s(self) -> Recipe:
        if self.train.kernels.recompute == "dots_and_attention" and self.backend.jax.attention != "splash":
            raise ValueError(
                "train.kernels.recompute 'dots_and_attention' keeps the splash kernel's outputs; backend.jax.attention "
                f"{self.backend.jax.attention!r} runs no kernel (its scores are what recompute saves): use attention "
                "splash, or recompute dots"
            )
        return self

    @model_validator(mode="after")
    def _selective_recompute_without_fsdp(self) -> Recipe:
        tb = self.backend.torch
        if self.train.kernels.recompute == "selective" and tb.fsdp and tb.devices * tb.nodes > 1:
            raise ValueError(
                "train.kernels.recompute 'selective' is Trainer's gradient checkpointing with a save policy; FSDP2's "
                "activation checkpointing (backend.torch.fsdp on several devices) takes no policy: set recompute full"
            )
        return self

    @field_validator("name")
    @classmethod
    def _name_is_one_path_component(cls, value: str) -> str:
        if not SAFE_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} can't name a folder: the name becomes <output_dir>/<name>-<backend>, so it is letters, "
                "digits, '.', '_' and '-' (starting with a letter or digit, at most 100), never a path"
            )
        return value

    @field_validator("hardware")
    @classmethod
    def _known_hardware(cls, value: str) -> str:
        import difflib

        if value not in HARDWARE and value != AUTO:  # auto: resolved by crosstune.recipe.auto_target at load
            close = difflib.get_close_matches(value, HARDWARE, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(HARDWARE)}"
            raise ValueError(f"unknown hardware target {value!r}; {hint}")
        return value
