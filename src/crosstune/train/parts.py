"""The backends' parts one at a time, for the code that measures or compiles a part alone (plan/, bench/): only
crosstune.train reaches crosstune.train.torch and .jax, and this is its small face for them. Each is what the backend
itself trains with, so a benchmark measures the real thing.

    torch_lora_model(recipe, on_gpu=..., empty=...)   # the base + PEFT LoRA + the run's initial LoRA, as trained
    load_torch_shard(model, checkpoint)               # after fully_shard: this rank's rows of a meta base
    torch_trainer_callbacks(*callbacks)               # more TrainerCallbacks on every torch trainer built inside
    torch_kernel_equivalence(family)                  # the train.kernels switches against their reference paths
    compile_step(recipe_file, ...)                    # the jax step compiled ahead of time for a TPU topology (libtpu,
                                                      # in a child process: crosstune.train.jax.aot)
    abstract_train_step(recipe, layers)               # that step from abstract weights, for a program of one's own
    jax_own_tracer_probes()                           # inside: tracing as jax 0.10 does it, quadratic in depth
    measure_step(recipe, layers, steps=...)           # the jax step run and timed on the attached devices
    measure_plain_tunix(recipe, layers, steps=...)    # Tunix's own loop at the same shape, timed the same way
    splash_attention(q, k, v, segment_ids, window=W)  # the step's attention kernel alone (on a TPU)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstune.families import model_dir_spec
from crosstune.families.spec import ModelSpec
from crosstune.recipe import Recipe, model_path
from crosstune.train.jax.aot_process import child_env, compile_step, find_libtpu
from crosstune.train.jax.config import remat_mode

__all__ = [
    "AbstractStep",
    "abstract_train_step",
    "compile_step",
    "find_libtpu",
    "jax_own_tracer_probes",
    "load_torch_shard",
    "remat_mode",
    "step_code_files",
    "torch_kernel_equivalence",
    "torch_lora_model",
    "torch_trainer_callbacks",
    "tpu_child_env",
]


def torch_lora_model(recipe: Recipe, *, on_gpu: bool, empty: bool = False) -> tuple[Any, Any, ModelSpec]:
    """(PEFT model, tokenizer, the base's spec): the recipe's base (model.dtype on a GPU, fp32 on CPU) with LoRA on
    its targets and the run's initial LoRA installed, as the torch backend trains it. `empty`: the base on the meta
    device, as an FSDP2 rank that reads only its own shard starts (fill it with load_torch_shard after fully_shard);
    its LoRA layers then get real storage on the CPU."""
    import torch
    from peft import get_peft_model

    from crosstune.train.torch.lora import install_initial_lora, lora_config
    from crosstune.train.torch.model import build_model
    from crosstune.train.torch.sharded_load import materialize_lora

    spec = model_dir_spec(model_path(recipe), recipe.model.family)
    base, tokenizer = build_model(recipe, on_gpu=on_gpu, empty=empty)
    model = get_peft_model(base, lora_config(recipe, base, spec)[0])
    if empty:
        materialize_lora(model, torch.device("cpu"))
    install_initial_lora(model, recipe, spec)
    return model, tokenizer, spec


def load_torch_shard(model: Any, checkpoint: Path) -> int:
    """After `fully_shard` of a model from torch_lora_model(empty=True): this rank's rows of every parameter read
    from `checkpoint`; the bytes this rank read."""
    from crosstune.train.torch.sharded_load import load_local_shards

    return load_local_shards(model, checkpoint)["bytes"]


@contextlib.contextmanager
def torch_trainer_callbacks(*callbacks: Any) -> Iterator[None]:
    """Inside: every torch trainer this process builds also calls these transformers TrainerCallbacks (one clock
    timing crosstune and plain TRL alike: bench/train_torch.py)."""
    from crosstune.train.torch import callbacks as torch_callbacks

    torch_callbacks.ADDED_CALLBACKS.extend(callbacks)
    try:
        yield
    finally:
        for callback in callbacks:
            torch_callbacks.ADDED_CALLBACKS.remove(callback)


Rows = list[tuple[str, float, float, float]]


def torch_kernel_equivalence(family: str) -> tuple[list[int], Rows, Rows]:
    """(the packed row's document lengths, the attention rows, the `train.kernels` switches' rows), each row (what
    is compared, |Δloss|, max |Δgrad|, max relative Δgrad), on a tiny random `family` model:
    crosstune.train.torch.equivalence, which the equivalence tests use too."""
    from crosstune.train.torch.equivalence import DOC_LENGTHS, kernel_equivalence

    return list(DOC_LENGTHS), *kernel_equivalence(family)


# --- the jax step compiled ahead of time for a TPU topology (`plan --compile`, `plan --search`, bench/) -------
# crosstune.train.jax's modules that make the compiled program or read it (a scanned step's: layer_scan's)
STEP_CODE = (
    "aot",
    "attention",
    "config",
    "kv_carry",
    "layer_scan",
    "logits",
    "lora",
    "loss",
    "model",
    "moe",
    "optimizer",
    "remat",
    "stacked_names",
    "train_step",
    "trainer",
)
ANALYSIS_CODE = ("hlo", "loops")  # crosstune.planner's modules that read the compiled program's text


def step_code_files() -> list[Path]:
    """The source files of STEP_CODE and ANALYSIS_CODE: a compile's result depends on their text."""
    src = Path(__file__).parent.parent
    return [src / "train" / "jax" / f"{n}.py" for n in STEP_CODE] + [src / "planner" / f"{n}.py" for n in ANALYSIS_CODE]


def tpu_child_env(accelerator: str) -> dict[str, str]:
    """The environment a child process compiles for a TPU topology in (`accelerator`: e.g. v5p-8): libtpu from
    `make tpu-compile-env` on its path, JAX on CPU; LibtpuMissing says how to install it."""
    return child_env(find_libtpu(), accelerator)


@dataclass(frozen=True)
class AbstractStep:
    """The recipe's train step for its TPU topology from abstract weights (nothing read or allocated): `step` is the
    trainer's own (HeldOnceStep), `trainer` tunix's PeftTrainer around the same model and optimizer. Run in a
    process started with tpu_child_env."""

    device_kind: str
    mesh: Any
    step: Any
    trainer: Any
    inputs: Any

    def lower(self) -> Any:
        """`step` lowered under the step's mesh (jax's Lowered: StableHLO, before XLA compiles it)."""
        from crosstune.train.jax.model import mesh_context

        with mesh_context(self.mesh):
            return self.step.lower(self.trainer.model, self.trainer.optimizer, self.inputs)

    def memory(self, program: Any) -> Any:
        """XLA's memory_analysis of `program` (a jitted function of model, optimizer and inputs, e.g. `step`)
        compiled under the step's mesh."""
        from crosstune.train.jax.model import mesh_context

        with mesh_context(self.mesh):
            lowered = program.lower(self.trainer.model, self.trainer.optimizer, self.inputs)
            return lowered.compile().memory_analysis()


@contextlib.contextmanager
def jax_own_tracer_probes() -> Iterator[None]:
    """Inside: jax's own Tracer.sharding and .device, whose every probe walks the trace so far, instead of
    crosstune's (crosstune.train.jax.tracing): the baseline of bench/trace_time.py."""
    from crosstune.train.jax.tracing import jax_own_probes

    with jax_own_probes():
        yield


def abstract_train_step(recipe: Recipe, layers: int | None = None) -> AbstractStep:
    """The recipe's step (its first `layers` decoder layers, or all) on its TPU topology's mesh."""
    from crosstune.train.jax.aot import abstract_step, hf_config, topology_mesh

    _, kind, mesh = topology_mesh(recipe)
    step, trainer, inputs, _, _ = abstract_step(recipe, hf_config(recipe, layers), mesh)
    return AbstractStep(kind, mesh, step, trainer, inputs)


def measure_step(recipe: Recipe, layers: int | None = None, **options: Any) -> dict:
    """The recipe's jax step (its first `layers` decoder layers, or all) built, filled, compiled and timed on the
    devices this process sees: crosstune.train.jax.measure (options: steps, warmup, profile_dir, say)."""
    from crosstune.train.jax.measure import measure_step as measure

    return measure(recipe, layers, **options)


def measure_plain_tunix(recipe: Recipe, layers: int | None = None, **options: Any) -> dict:
    """Tunix's own LoRA loop at the recipe's shape, timed as measure_step times crosstune's (the baseline of
    bench/tpu_chip_step.py): crosstune.train.jax.baseline."""
    from crosstune.train.jax.baseline import measure_plain_tunix as measure

    return measure(recipe, layers, **options)


def splash_attention(q: Any, k: Any, v: Any, segment_ids: Any, *, window: int | None) -> Any:
    """The step's splash attention (crosstune.train.jax.attention) on one device, compiled for the TPU: q [B, T, N,
    H], k and v [B, T, K, H], segment_ids [B, T]."""
    from crosstune.train.jax.attention import splash_attention as attention

    return attention(q, k, v, segment_ids, window=window, interpret=False)
