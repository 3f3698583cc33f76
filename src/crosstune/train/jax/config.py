"""The jax backend's settings: the recipe mapped onto what the tunix model, its Qwix LoRA and the trainer are built
with (the torch backend's counterpart: crosstune.train.torch.config). One mapping for the training run, the step
probe, `plan --compile` (the step compiled for a TPU topology) and `plan --run` (the step timed on a chip)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from crosstune.recipe.schema import LoraSection, Recipe, TrainSection

REMAT_MODES = (None, "full", "dots")  # crosstune.train.jax.remat says what each recomputes


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
            "has no such kernel outputs to keep: use recompute full, or dots (keeps the weight matmuls' outputs)"
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
    # whose LoRA branch: crosstune's (crosstune.train.jax.lora_provider) or Qwix's own, which bench/ measures
    # the step against
    lora_provider: str = "crosstune"

    @classmethod
    def of(cls, recipe: Recipe, platform: str) -> ModelSettings:
        return cls(
            dtype=recipe.model.dtype,
            compute_dtype=compute_dtype(recipe, platform),
            remat=remat_mode(recipe.train),
            lora=recipe.lora,
            seed=recipe.train.seed,
            attention=recipe.backend.jax.attention,
        )

    def replace(self, **changes: Any) -> ModelSettings:
        return dataclasses.replace(self, **changes)

    def kwargs(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"lora": self.lora}  # asdict would turn the section into a dict
