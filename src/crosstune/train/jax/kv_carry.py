"""One scan body for both segments of a Gemma 4 E model whose KV-sharing layers are built as the layers that own
their K/V (the E4B: 42 layers, 7 groups of 5 sliding + 1 global, the last 3 groups reading layers 22's and 23's
K/V), in place of two (crosstune.train.jax.layer_scan's segments): XLA emits one group's layers, not two groups'
(the E4B's scanned step compiled for a TPU host: 12 layer bodies, forward and backward, become 6).

The scan's inputs say, per group, whether it owns its K/V (`Choice.owns`: the first `owning` groups); its carry
holds the source layers' K/V (the owning segment's last group's layers that later ones read: the E4B's 22 and 23),
written in every owning group (a select of [B, T, K, H]: the last owning group's stay), read by every sharing group.
Each layer runs tunix's own attention (its `block`, or crosstune's splash one) with a `kv_shared_cache` whose K/V
come, when tunix's code reads them (after its query projection, before its output projection: the LoRA dropout
draws in tunix's order), from a `lax.cond` on the flag: the layer's own K/V projection (`own_kv`, what tunix's block
computes without a shared cache) in an owning group, the carried source's in a sharing one.

The extra work of a sharing layer over unrolled: the conditional's branch select (no K/V projection: the cond skips
it, where a `jnp.where` of both would run the K/V einsum and its LoRA, ~3 % of the E4B layer's flops, and draw a
dropout mask the unrolled layer doesn't), one select per carried source, and memory: the residuals the cond's
linearization keeps for the branch not taken (the K/V einsum's and its LoRA's outputs, zeros: [B, T, 2, K, H], the
E4B with one 3072-token row 6 MB each) and the carried K/V each group reads. XLA for one v5e chip, the E4B's first
24 layers: 20.92 GB of temporaries against 20.36 in two segments (+2.7 %); at full depth for v6e-4 the one body
holds less (16.69 GB per device against 19.94) and compiles in 321 s of CPU against 495 (this 2-core host).

The sharing layers have no K/V LoRA (tunix never calls their K/V projections, so Qwix made none): the stack holds
the owning groups' K/V LoRA only ([owning, ...]; their names map to the owning layers' alone,
crosstune.train.jax.stacked_names) and the scan reads it zero-padded to all groups.
Models whose sharing layers are built otherwise (the E2B's MLPs twice as wide) keep two segments.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from flax import nnx

from crosstune.train.jax.attention import own_kv
from crosstune.train.jax.stacked_names import KV_LORA


def kv_lora(path: tuple) -> bool:
    """Whether a Variable's path (in a layer or the model) is a K/V projection's LoRA tensor's."""
    return bool(KV_LORA.search("." + ".".join(str(k) for k in path)))


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Choice:
    """A layer's `kv_shared_cache` in the one body: its own K/V when `owns` (a traced bool), else the source's."""

    owns: jax.Array
    k: jax.Array
    v: jax.Array


class _LateKV:
    """tunix's `kv_shared_cache["k"]`, `["v"]`: the K/V `choice` picks, computed on the first read."""

    def __init__(self, attn: nnx.Module, x, segment_pos, choice: Choice) -> None:
        self.attn, self.x, self.segment_pos, self.choice, self.kv = attn, x, segment_pos, choice, None

    def __getitem__(self, key: str):
        if self.kv is None:
            graphdef, state = nnx.split(self.attn)

            def own(state):
                attn = nnx.merge(graphdef, state)
                k, v = own_kv(attn, self.x, self.segment_pos)
                return (k.astype(self.choice.k.dtype), v.astype(self.choice.v.dtype)), nnx.state(attn)

            def shared(state):
                return (self.choice.k, self.choice.v), state

            self.kv, state = jax.lax.cond(self.choice.owns, own, shared, state)
            nnx.update(self.attn, state)
        return self.kv[{"k": 0, "v": 1}[key]]


@functools.cache
def choosing(cls: type) -> type:
    """`cls` (a Gemma 4 attention) whose block takes a `Choice` as its `kv_shared_cache`."""

    def block(self, x, segment_pos, cache, attn_mask, kv_shared_cache=None):
        if isinstance(kv_shared_cache, Choice):
            kv_shared_cache = _LateKV(self, x, segment_pos, kv_shared_cache)
        return cls.block(self, x, segment_pos, cache, attn_mask, kv_shared_cache)

    return type(f"OneBody{cls.__name__}", (cls,), {"block": block, "__module__": __name__})


def _signature(layer: nnx.Module) -> dict:
    """A layer's Variables (but its K/V LoRA) by path: type, shape, dtype."""
    out = {}
    for path, node in nnx.iter_graph(layer):
        if isinstance(node, nnx.Variable) and not kv_lora(path):
            value = node.get_value()
            out[path] = (type(node).__name__, tuple(value.shape), str(value.dtype))
    return out


def one_body(layers: list, sharing: list[int], owning_end: int, period: int) -> bool:
    """Whether layers [0, owning_end) own their K/V and the rest read them, in one scan body: whole groups own
    theirs, every layer is built as the owning one at its position (but its K/V LoRA), and the layers read have
    one position each in the last owning group, the same for every sharing layer at a position."""
    n = len(layers)
    if owning_end % period or owning_end < period or n - owning_end < period:
        return False
    if any(sharing[i] != i for i in range(owning_end)):
        return False
    sources = [sharing[i] for i in range(owning_end, n)]
    if any(not owning_end - period <= j < owning_end for j in sources):
        return False
    if any(sharing[i] != sharing[owning_end + (i - owning_end) % period] for i in range(owning_end, n)):
        return False
    owners = [_signature(layer) for layer in layers[:period]]
    types = [getattr(layer.attn, "attn_type", None) for layer in layers]
    return all(
        types[i] == types[i % period] and _signature(layers[i]) == owners[i % period] for i in range(owning_end, n)
    )


def install(layers: list) -> None:
    """Give the layers' attention the one body's `Choice` (in place)."""
    for layer in layers:
        layer.attn.__class__ = choosing(type(layer.attn))


def initial(attn: nnx.Module, x) -> tuple:
    """The carry's K/V before the first group writes them: zeros of the shape `attn` computes."""
    shape = (*x.shape[:2], attn.num_kv_heads, attn.head_dim)
    zeros = jnp.zeros(shape, attn.config.dtype)
    return zeros, zeros


def select(owns, new: tuple, old: tuple) -> tuple:
    return tuple(jnp.where(owns, a, b) for a, b in zip(new, old, strict=True))
