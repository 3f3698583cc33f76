"""The tunix tensors of a ModelSpec with their (fsdp, tp) PartitionSpecs, and what a mesh does to them.

Mirrors tunix 0.1.7's default ShardingConfig and Qwix's LoRA sharding (A takes the base weight's contracting
axes, B the rest) without building anything, so the planner can price a mesh before allocating. What it predicts
is checked against the real model by tests/test_plan.py (replicated tensors) for the tiny models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crosstune.families.spec import ModelSpec

Spec = tuple[str | None, ...]


@dataclass(frozen=True)
class Tensor:
    path: str  # tunix dotted path, e.g. layers.5.attn.k_einsum.w
    shape: tuple[int, ...]
    spec: Spec  # tunix's PartitionSpec for it
    contracting: tuple[int, ...] = ()  # axes a LoRA A matrix takes (empty: no LoRA possible)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def _attention(i: int, spec: ModelSpec) -> list[Tensor]:
    a, d = spec.kind(i), spec.hidden_size
    n, k, h = a.num_heads, a.num_kv_heads, a.head_dim
    p = f"layers.{i}.attn"
    out = [Tensor(f"{p}.attn_vec_einsum.w", (n, h, d), ("tp", None, "fsdp"), (0, 1))]
    if a.k_eq_v:  # Gemma 4 global layers: keys reused as values; tunix shards k like q (no 1-head exception)
        out += [
            Tensor(f"{p}.q_einsum.w", (n, d, h), ("tp", "fsdp", None), (1,)),
            Tensor(f"{p}.k_einsum.w", (k, d, h), ("tp", "fsdp", None), (1,)),
        ]
    elif n == k and spec.family == "gemma3":  # tunix's Gemma 3 fuses q, k, v when heads == KV heads
        out.append(Tensor(f"{p}.qkv_einsum.w", (3, n, d, h), (None, "tp", "fsdp", None), (2,)))
    else:
        kv_spec = (None, None, "fsdp", None) if k == 1 else (None, "tp", "fsdp", None)  # tunix: 1 KV head unsplit
        out += [
            Tensor(f"{p}.q_einsum.w", (n, d, h), ("tp", "fsdp", None), (1,)),
            Tensor(f"{p}.kv_einsum.w", (2, k, d, h), kv_spec, (2,)),
        ]
    out += [Tensor(f"{p}._query_norm.scale", (h,), ("tp",)), Tensor(f"{p}._key_norm.scale", (h,), ("tp",))]
    return out


def tunix_tensors(spec: ModelSpec) -> list[Tensor]:
    """Every parameter of the tunix model of `spec` (dense text decoder)."""
    d, f = spec.hidden_size, spec.intermediate_size
    out = [
        Tensor("embedder.input_embedding", (spec.vocab_size, d), ("tp", "fsdp")),
        Tensor("final_norm.scale", (d,), ("tp",)),
    ]
    for i in range(spec.num_layers):
        out += _attention(i, spec)
        out += [
            Tensor(f"layers.{i}.mlp.gate_proj.kernel", (d, f), ("fsdp", "tp"), (0,)),
            Tensor(f"layers.{i}.mlp.up_proj.kernel", (d, f), ("fsdp", "tp"), (0,)),
            Tensor(f"layers.{i}.mlp.down_proj.kernel", (f, d), ("tp", "fsdp"), (0,)),
        ]
        out += [
            Tensor(f"layers.{i}.{n}.scale", (d,), ("tp",))
            for n in ("pre_attention_norm", "post_attention_norm", "pre_ffw_norm", "post_ffw_norm")
        ]
    return out


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
    """Base tensors that carry LoRA for the neutral targets (through the family's module names)."""
    from crosstune.families import get_family

    fam = get_family(spec.family)
    wanted = {
        f"layers.{i}.{m}.w" if "attn" in m else f"layers.{i}.{m}.kernel"
        for i in range(spec.num_layers)
        for m in fam.tunix_lora_modules(spec, i, targets)
    }
    return [t for t in tunix_tensors(spec) if t.path in wanted]
