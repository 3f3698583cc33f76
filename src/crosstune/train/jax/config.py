"""The jax backend's settings: the recipe mapped onto what the tunix model, its Qwix LoRA and the trainer are built
with (the torch backend's counterpart: crosstune.train.torch.config). One mapping for the training run, the step
probe, `plan --compile` (the step compiled for a TPU topology) and `plan --run` (the step timed on a chip)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstune.recipe.schema import LoraSection, Recipe, TrainSection

REMAT_MODES = (None, "full", "dots", "dots_and_attention")  # crosstune.train.jax.remat says what each recomputes


def compute_dtype(recipe: Recipe, platform: str) -> str:
    """The activations' dtype: bf16 where the chips are made for it and train.precision is bf16; on CPU the
    recipe's backend.jax.cpu_compute_dtype (float32 unless a rehearsal asks for bfloat16)."""
    if platform == "cpu":
        return recipe.backend.jax.cpu_compute_dtype
    return "bfloat16" if recipe.train.precision == "bf16" else "float32"


def remat_mode(train: TrainSection) -> str | None:
    """The jax backend's recompute mode for the recipe's train section."""
    if not train.gradient_checkpointing:
        return None
    if train.kernels.recompute == "selective":
        raise ValueError(
            "train.kernels.recompute 'selective' keeps PyTorch SDPA kernels' outputs (TRL's policy); the jax backend "
            "has no SDPA: use recompute dots_and_attention (keeps the weight matmuls' and the splash kernel's "
            "outputs), dots, or full"
        )
    return train.kernels.recompute


@dataclass(frozen=True)
class ModelSettings:
    """How the recipe's tunix model is built on a platform (crosstune.train.jax.model.abstract_model/build_model's
    keyword arguments)."""

    dtype: str  # the base weights'
    compute_dtype: str  # the activations'
    remat: str | None  # crosstune.train.jax.remat's mode
    lora: LoraSection | None
    seed: int
    attention: str  # "dense" | "splash"
    splash_block: int = 512  # splash's tile and backward (crosstune.train.jax.attention.make_kernel)
    splash_fused_backward: bool = True
    # whose LoRA branch: crosstune's (crosstune.train.jax.lora_provider) or Qwix's own, which bench/ measures
    # the step against
    lora_provider: str = "crosstune"
    # the layers held stacked and scanned: crosstune.train.jax.layer_scan.stack_layers, the builder's last step
    # after the weights, the initial LoRA and the dropout stream are in (not a model-building argument)
    scan_layers: bool = False

    @classmethod
    def of(cls, recipe: Recipe, platform: str) -> ModelSettings:
        return cls(
            dtype=recipe.model.dtype,
            compute_dtype=compute_dtype(recipe, platform),
            remat=remat_mode(recipe.train),
            lora=recipe.lora,
            seed=recipe.train.seed,
            attention=recipe.backend.jax.attention,
            splash_block=recipe.backend.jax.splash_block,
            splash_fused_backward=recipe.backend.jax.splash_fused_backward,
            scan_layers=bool(recipe.backend.jax.scan_layers),
        )

    def replace(self, **changes: Any) -> ModelSettings:
        return dataclasses.replace(self, **changes)

    def kwargs(self) -> dict[str, Any]:
        """abstract_model/build_model's keyword arguments (all but scan_layers)."""
        kwargs = dataclasses.asdict(self) | {"lora": self.lora}  # asdict would turn the section into a dict
        del kwargs["scan_layers"]
        return kwargs


CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"  # jax's own variable: a study points every stage at its bundle's folder


def use_compile_cache(default: Path) -> Path:
    """Keep every XLA program this process compiles in jax's persistent compilation cache: $JAX_COMPILATION_CACHE_DIR
    where set (a study's bundle), else `default` (the run's own folder); a restart loads the train step from there
    instead of compiling it again. Returns the folder. jax opens its cache once per process: a second run in the
    same process (tests, a study's stages) is pointed at its own folder by resetting it, so no run writes into
    another's."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    folder = Path(os.environ.get(CACHE_ENV) or default)
    folder.mkdir(parents=True, exist_ok=True)
    if jax.config.jax_compilation_cache_dir != str(folder):
        compilation_cache.reset_cache()
        compilation_cache.set_cache_dir(str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)  # the step, not every small program
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
