"""The tunix tensors of a ModelSpec with their (fsdp, tp) PartitionSpecs, and what a mesh does to them.

The tensors, shapes and tunix 0.1.7's default shardings come from the family's HF <-> Tunix table
(families/<name>/tunix.py); Qwix's LoRA sharding (A takes the base weight's contracting axes, B the rest) is
priced here without building anything, so the planner can price a mesh before allocating. What it predicts is
checked against the real model by tests (replicated tensors, every parameter's shape) for the tiny models.
"""

from __future__ import annotations

import math

from crosstune.families import get_family
from crosstune.families.spec import ModelSpec
from crosstune.families.tunix_table import Spec, Tensor

__all__ = [
    "Spec",
    "Tensor",
    "fitted",
    "lora_targets_tensors",
    "lora_tensors",
    "per_device_elements",
    "trained_lora_tensors",
    "tunix_tensors",
]


def tunix_tensors(spec: ModelSpec) -> list[Tensor]:
    """Every parameter of the tunix model of `spec` (every expert of a MoE, the unread K/V weights tunix keeps on
    KV-shared layers)."""
    return get_family(spec.family).tunix_tensors(spec)


def lora_tensors(t: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """Qwix's LoRA A (contracting axes + r) and B (r + remaining axes) of base tensor `t`; like Qwix, no
    sharding on axes of size 1."""
    rest = tuple(ax for ax in range(len(t.shape)) if ax not in t.contracting)

    def make(suffix: str, axes: tuple[int, ...], rank_first: bool) -> Tensor:
        shape = tuple(t.shape[ax] for ax in axes)
        spec = tuple(None if t.shape[ax] == 1 else t.spec[ax] for ax in axes)
        if rank_first:
            return Tensor(t.path + suffix, (rank, *shape), (None, *spec))
        return Tensor(t.path + suffix, (*shape, rank), (*spec, None))

    return make("_lora_a", t.contracting, rank_first=False), make("_lora_b", rest, rank_first=True)


def fitted(t: Tensor, mesh: dict[str, int]) -> tuple[Spec, list[int]]:
    """The spec after dropping mesh axes that don't divide their dimension, and the axes dropped."""
    spec, dropped = list(t.spec), []
    for ax, name in enumerate(t.spec):
        if name is not None and t.shape[ax] % mesh[name]:
            spec[ax] = None
            dropped.append(ax)
    return tuple(spec), dropped


def per_device_elements(t: Tensor, mesh: dict[str, int]) -> float:
    spec, _ = fitted(t, mesh)
    return t.size / math.prod(mesh[n] for n in spec if n is not None)


def lora_targets_tensors(spec: ModelSpec, targets: list[str] | tuple[str, ...]) -> list[Tensor]:
    """Base tensors that carry LoRA for the neutral targets (the family table's LoRA rows)."""
    table = get_family(spec.family).tunix
    wanted = {f"layers.{i}.{r.path}" for i in range(spec.num_layers) for r in table.lora_rows(spec, i, targets)}
    return [t for t in tunix_tensors(spec) if t.path in wanted]


def trained_lora_tensors(spec: ModelSpec, targets: list[str] | tuple[str, ...], rank: int) -> list[Tensor]:
    """Qwix LoRA A and B of every adapted tensor at the width training installs: rank r, or c·r for a fused einsum
    whose c components each get their own LoRA (the exact block form of separate PEFT LoRAs, e.g. k and v on a
    kv_einsum: crosstune.families.lora_layout; crosstune.train.jax.lora.widen_block_lora gives the same shapes)."""
    table = get_family(spec.family).tunix
    tensors = {t.path: t for t in tunix_tensors(spec)}
    out: list[Tensor] = []
    for i in range(spec.num_layers):
        present = set(spec.targets_present(i, targets))
        for row in table.lora_rows(spec, i, targets):
            block = row.fused and len(present & set(row.lora)) > 1
            out += lora_tensors(tensors[f"layers.{i}.{row.path}"], rank * len(row.lora) if block else rank)
    return out
