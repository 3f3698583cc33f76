"""The decoder layers held stacked and run as a `jax.lax.scan` over groups of layers (backend.jax.scan_layers), as
MaxText's scan_layers does: XLA compiles one group's body, and the step's state (frozen weights, LoRA params, the
optimizer's moments) is one [G, ...] array per tensor of a group, so neither the body nor the code around it (the
optimizer's update, the gradients) grows with depth. Tunix's models loop over their layers in Python: unrolled, the
step is traced and compiled layer by layer (the 31B's 60 layers: ~350 s in XLA).

A group is one period P of the layers' attention pattern (the 31B: 5 sliding + 1 global, P = 6, 60 layers = 10
groups): layers p and p + P have the same structure and shapes. `stack_layers(model, mesh)` (in place, once, after
the weights and the initial LoRA are in) turns `model.layers` into `LayerStack`s, one per segment: the first
group's P tunix layers, each of their Variables holding the G groups' values stacked on a new leading axis (sharded
as the layer's was, whole along the groups), and any layers after the complete groups as they are (Gemma 3 27B's 62
= 10 × 6 + 2). Tunix's own `__call__` (with Qwix's LoRA interception around it: the LoRA branch and its dropout are
in the scan) meets each stack as one layer; a stack scans a body that merges the group's graph with one group's
slice of the state and calls its P layers as tunix's loop does (no cache). Remat (tunix's per-layer nnx.remat,
crosstune's "dots" and "dots_and_attention") applies per layer inside the body; without it the body saves every
residual its linearization names (crosstune.train.jax.remat: dots_and_attention keeps what XLA keeps unrolled but
the elementwise tensors).

The Gemma 4 E sizes make two segments: the layers that own their K/V, then those that reuse an earlier layer's (the
E4B's last 18 of 42 read layers 22's and 23's). Tunix's loop hands layer i's per-layer input and, to a KV-shared
layer, its source's K/V; the stacks take the same through tunix's own loop, which then has two "layers": the first
stack returns its source layers' K/V as its K/V, tunix's sharing pattern says stack 1 reads stack 0's, and the
embedder returns every layer's per-layer inputs as each stack's row (`_WholePerLayerInputs`); each layer in a scan
gets its own slice of them (the scan's xs) and its source's K/V (a constant of the body: one source per position).
Where the sharing layers are built as the owning ones (the E4B; not the E2B, whose sharing MLPs are twice as wide)
and the owning ones make whole groups, one stack scans all the groups in one body instead, the flag of the groups
that own their K/V its xs and the source layers' K/V its carry: crosstune.train.jax.kv_carry.

A MoE layer in a stack (Gemma 4 26B-A4B) reads its experts whole, every group's in one [E·G, ...] tensor per layout
ragged_dot reads, and pads its group sizes to its own group's experts (crosstune.train.jax.moe.WholeMoE): sliced
per group, XLA copied each layer's experts out of the stack in both loops.

State every layer shares, the LoRA dropout's one `nnx.Rngs` stream, is the scan's carry: its count advances through
the groups as it does unrolled, so every draw gets the same key (the same masks). Names: crosstune.train.jax.
stacked_names.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from crosstune.families.spec import layer_period
from crosstune.train.jax import kv_carry
from crosstune.train.jax.moe import GROUP, ResidualRoutedMoE, WholeExperts, hold_whole
from crosstune.train.jax.remat import in_scan
from crosstune.train.jax.stacked_names import ScanError, layer_name, per_layer

__all__ = ["LayerStack", "ScanError", "layer_name", "per_layer", "stack_layers", "stacked"]

SHARED = nnx.RngState  # what every layer refers to (the dropout stream): the scan's carry, never stacked
HINT = "set backend.jax.scan_layers: false for this model"


def segments(model: nnx.Module) -> list[tuple[int, int]]:
    """[first, end) of each run of layers stacked apart: all of them, or (Gemma 4 E sizes, KV shared across layers)
    the layers that own their K/V, then the layers that read an earlier one's."""
    n = len(model.layers)
    sharing = getattr(model, "kv_cache_sharing_patterns", None)
    if sharing is None or all(j == i for i, j in enumerate(sharing)):
        return [(0, n)]
    u = next(i for i, j in enumerate(sharing) if j != i)
    if any(j == i or j >= u for i, j in enumerate(sharing[u:], u)):
        raise ScanError(
            f"backend.jax.scan_layers: KV sharing {sharing}: layers owning their K/V after layer {u}, the first that "
            f"shares one, or reading a later layer's; {HINT}"
        )
    return [(0, u), (u, n)]


class LayerStack(nnx.Module):
    """Called like one tunix decoder layer, runs one segment's layers: G·P stacked ones (a scan over G groups), then
    the tail. `sources`: the layers (of this segment) whose K/V later layers read, returned as this "layer"'s K/V;
    `reads[k]`: the layer whose K/V the segment's k-th layer reads (a KV-shared segment; empty otherwise)."""

    def __init__(
        self,
        stack: list,
        groups: int,
        tail: dict[str, nnx.Module],
        *,
        first: int = 0,
        sources: tuple[int, ...] = (),
        reads: tuple[int, ...] = (),
        per_layer_dim: int = 0,
        owning: int = 0,
    ) -> None:
        self.stack = nnx.List(stack)
        self.groups = groups
        self.tail = nnx.Dict(tail)
        self.first, self.sources, self.reads, self.per_layer_dim = first, sources, reads, per_layer_dim
        self.owning = owning  # one body for a KV-sharing model (kv_carry): the first `owning` groups own their K/V

    def __call__(self, x, positions, cache, attention_mask, **kwargs):
        if cache is not None:
            raise ScanError("backend.jax.scan_layers: a stacked model trains and prefills; it keeps no KV cache")
        period, arity = len(self.stack), [2]
        inputs = kwargs.get("per_layer_input")  # every layer's, [B, T, L·D] (_WholePerLayerInputs), or None
        if inputs is not None:
            inputs = inputs.reshape(*inputs.shape[:2], -1, self.per_layer_dim)  # [B, T, L, D]
        shared_kv = kwargs.get("kv_shared_cache")  # {"k": {layer: K}, "v": {layer: V}} of the layers read

        def extra(k: int, layer_input) -> dict:
            """The k-th layer of the segment's own arguments: its per-layer input, its source's K/V."""
            out = {} if layer_input is None else {"per_layer_input": layer_input}
            if self.reads and not self.owning:
                out["kv_shared_cache"] = {"k": shared_kv["k"][self.reads[k]], "v": shared_kv["v"][self.reads[k]]}
            return out

        def call(layer, x, k: int, layer_input, kv=None):
            mine = extra(k, layer_input) if kv is None else {**extra(k, layer_input), "kv_shared_cache": kv}
            out = layer(x, positions, None, attention_mask, **{**kwargs, **mine})
            arity[:] = [len(out)]
            return out[1], (out[2] if len(out) > 2 else None)

        if self.owning:
            return self._one_body(x, inputs, call, arity)

        kept = sorted({(j - self.first) % period for j in self.sources if j - self.first < self.groups * period})

        def group(layers, x, group_inputs):
            kvs = {}
            for p, layer in enumerate(layers):
                x, kv = call(layer, x, p, None if group_inputs is None else group_inputs[p])
                if p in kept:
                    kvs[p] = kv
            return x, kvs

        whole = self.groups * period
        xs = None
        if inputs is not None:  # [B, T, G·P, D] -> [G, P, B, T, D]: group g's P layers' inputs
            mine = inputs[:, :, self.first : self.first + whole]
            xs = jnp.moveaxis(mine.reshape(*mine.shape[:2], self.groups, period, -1), (2, 3), (0, 1))
        x, kvs = _scanned(self.stack, x, xs, group)
        found = {  # a source in the groups: its position's K/V, its group's slice
            j: jax.tree.map(lambda a, g=(j - self.first) // period: a[g], kvs[(j - self.first) % period])
            for j in self.sources
            if j - self.first < whole
        }
        for key in sorted(self.tail, key=int):
            i = int(key)
            x, kv = call(self.tail[key], x, i - self.first, None if inputs is None else inputs[:, :, i])
            if i in self.sources:
                found[i] = kv
        if self.sources:  # tunix's loop hands these to the next stack as its kv_shared_cache {"k": .., "v": ..}
            return None, x, ({j: kv[0] for j, kv in found.items()}, {j: kv[1] for j, kv in found.items()})
        return (None, x) + (None,) * (arity[0] - 2)  # tunix's (cache, x[, kv]) of a layer

    def _one_body(self, x, inputs, call, arity):
        """All the groups in one scan (crosstune.train.jax.kv_carry): the groups' flags and per-layer inputs its
        xs, the source layers' K/V in its carry; then the tail, reading the carried K/V."""
        period, whole = len(self.stack), self.groups * len(self.stack)
        slot = {q: self.reads[self.owning * period + q] % period for q in range(period)}  # the position q reads
        kept = sorted(set(slot.values()))
        carry = {q: kv_carry.initial(self.stack[q].attn, x) for q in kept}
        owns = jnp.arange(self.groups) < self.owning
        xs = None
        if inputs is not None:
            xs = jnp.moveaxis(inputs[:, :, :whole].reshape(*inputs.shape[:2], self.groups, period, -1), (2, 3), (0, 1))

        def group(layers, state, xs_g):
            (x, carry), (owns, group_inputs) = state, xs_g
            new = dict(carry)
            for p, layer in enumerate(layers):
                choice = kv_carry.Choice(owns, *carry[slot[p]])
                x, kv = call(layer, x, p, None if group_inputs is None else group_inputs[p], choice)
                if p in carry:
                    new[p] = kv_carry.select(owns, kv, carry[p])
            return (x, new), None

        (x, carry), _ = _scanned(self.stack, (x, carry), (owns, xs), group)
        for key in sorted(self.tail, key=int):
            i = int(key)
            k, v = carry[self.reads[i] % period]
            x, _ = call(self.tail[key], x, i, None if inputs is None else inputs[:, :, i], {"k": k, "v": v})
        return (None, x) + (None,) * (arity[0] - 2)


def _scanned(stack: nnx.Module, x, xs, group):
    """`x` through `group(layers_g, x, xs_g)` for each group g: a scan whose carry is `x` (any pytree) and the SHARED
    state and whose inputs are the groups' slices of `stack`'s own Variables and of `xs`, and g itself (`GROUP`
    while the body is traced: a MoE layer's offset into its experts' stack). The WholeExperts
    (crosstune.train.jax.moe.WholeMoE) are no input: the body closes over them, a loop-invariant operand, unsliced.
    What a call changes is written back into `stack`. Returns (x, what the calls returned beside x, stacked over the
    groups). A Variable stacked over fewer groups (the owning groups' K/V LoRA, kv_carry) is read zero-padded to all
    of them."""
    graphdef, shared, whole, own = nnx.split(stack, SHARED, WholeExperts, ...)
    groups = max(a.shape[0] for a in jax.tree.leaves(own))
    padded = jax.tree.map(
        lambda a: a if len(a) == groups else jnp.pad(a, [(0, groups - len(a))] + [(0, 0)] * (a.ndim - 1)), own
    )

    def body(carry, sliced):
        x, shared = carry
        own_g, xs_g, g = sliced
        layers = nnx.merge(graphdef, shared, whole, own_g)
        token = GROUP.set(g)
        try:
            x, ys = group(layers, x, xs_g)
        finally:
            GROUP.reset(token)
        _, shared, _, own_g = nnx.split(layers, SHARED, WholeExperts, ...)
        return (x, shared), (own_g, ys)

    (x, shared), (out, ys) = jax.lax.scan(body, (x, shared), (padded, xs, jnp.arange(groups)))
    nnx.update(stack, shared, jax.tree.map(lambda a, b: a if len(a) == len(b) else a[: len(b)], out, own))
    return x, ys


@functools.cache
def _whole_per_layer_inputs(embedder: type, rows: int) -> type:
    """tunix's embedder whose per-layer inputs come as `rows` rows of every layer's ([B, T, rows, L·D]): tunix's loop
    hands stack i `per_layer_inputs[:, :, i, :]`, so each stack gets all of them and takes its own layers'."""

    class _WholePerLayerInputs(embedder):
        def encode_per_layer_input(self, x, t):
            y = super().encode_per_layer_input(x, t)  # [B, T, L, D]
            b, n, layers, d = y.shape
            return jnp.broadcast_to(y.reshape(b, n, 1, layers * d), (b, n, rows, layers * d))

    return _WholePerLayerInputs


def _canonical(module: nnx.Module) -> str:
    """A layer's graph without the layer number of Qwix's module paths (`qwix_path = ('layers', i, ...)`, the only
    static difference of layers p and p + P; Qwix's rules match any layer number)."""
    return re.sub(r"'layers', \d+", "'layers', #", repr(nnx.graphdef(module)))


def _variables(module: nnx.Module) -> dict[tuple, nnx.Variable]:
    return {path: node for path, node in nnx.iter_graph(module) if isinstance(node, nnx.Variable)}


def _check_shared(layers: list) -> None:
    """Every Variable two layers share is SHARED and shared by all of them; every SHARED one is shared by all."""
    refs: dict[int, tuple[int, nnx.Variable]] = {}
    for layer in layers:
        for node in {id(v): v for v in _variables(layer).values()}.values():
            refs[id(node)] = (refs.get(id(node), (0, node))[0] + 1, node)
    for count, node in refs.values():
        if isinstance(node, SHARED) != (count == len(layers)) and len(layers) > 1:
            raise ScanError(
                f"backend.jax.scan_layers: a {type(node).__name__} held by {count} of the {len(layers)} layers: "
                "only the dropout stream may be shared, and by every layer"
            )


@functools.cache
def _stacker(sharding: NamedSharding):
    """One jitted stack per sharding: tensors of one shape (a run's alike layers) compile it once."""
    return jax.jit(lambda *xs: jnp.stack(xs), out_shardings=sharding)


def _stacked(values: list, spec, mesh: Mesh):
    """The groups' values of one tensor stacked on a new leading axis, sharded as one was and whole along G."""
    sharding = NamedSharding(mesh, PartitionSpec(None, *(spec or ())))
    first = values[0]
    if isinstance(first, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct((len(values), *first.shape), first.dtype, sharding=sharding)
    out = _stacker(sharding)(*values)
    for value in values:  # free each group's copy now: the build holds one extra tensor at a time, not the layers
        value.delete()
    return out


def _stack(layers: list, mesh: Mesh, *, first: int, owning: int = 0, **static) -> LayerStack:
    """One segment's layers (layer `first` onward) as a LayerStack: its first group's layers holding every group's
    values, the layers after the complete groups as they are. `owning` (one body for a KV-sharing model, kv_carry):
    the groups after the first `owning` are built as the owning ones at their position but have no K/V LoRA."""
    p = layer_period([getattr(layer.attn, "attn_type", None) for layer in layers])
    groups = len(layers) // p
    whole = groups * p
    shapes = [_canonical(layer) for layer in layers[:p] + (layers[owning * p : (owning + 1) * p] if owning else [])]
    for i in range(p, whole):
        if _canonical(layers[i]) != shapes[i % p + (p if owning and i >= owning * p else 0)]:
            raise ScanError(
                f"backend.jax.scan_layers: layer {first + i} is built unlike layer {first + i % p}, one period before"
            )
    reads = static.get("reads", ())
    if reads and not owning and any(reads[i] != reads[i % p] for i in range(whole)):
        raise ScanError(f"backend.jax.scan_layers: layers {first}… read K/V of {reads}: not one source per position")
    for q, one in enumerate(layers[:p]):
        own = {path: v for path, v in _variables(one).items() if not isinstance(v, SHARED)}
        others = [_variables(layers[g * p + q]) for g in range(groups)]
        for path, variable in own.items():
            spec = variable.get_metadata().get("out_sharding")
            values = [o[path].get_value() for o in others if path in o]
            if len(values) != groups and not (owning and kv_carry.kv_lora(path) and len(values) == owning):
                raise ScanError(f"backend.jax.scan_layers: {path} in {len(values)} of the {groups} groups")
            variable.set_value(_stacked(values, spec, mesh))
            if spec:
                variable.set_metadata(out_sharding=(None, *spec))
        for _, module in list(one.iter_modules()):  # its experts whole, unsliced by the scan (moe.WholeMoE)
            if type(module) is ResidualRoutedMoE:
                hold_whole(module, groups, mesh)
    tail = {str(first + i): layer for i, layer in enumerate(layers) if i >= whole}
    if owning:
        kv_carry.install(layers[:p])
    return LayerStack(layers[:p], groups, tail, first=first, owning=owning, **static)


def stack_layers(model: nnx.Module, mesh: Mesh) -> None:
    """Hold `model`'s decoder layers stacked per segment (module docstring), in place."""
    layers = list(model.layers)
    parts = segments(model)
    _check_shared(layers)
    in_scan(model)  # the matmul-saving recompute without the barrier a scan's loops make needless
    sharing = list(getattr(model, "kv_cache_sharing_patterns", None) or range(len(layers)))
    sources = {j for i, j in enumerate(sharing) if j != i}
    dim = getattr(model.config, "per_layer_input_dim", 0) or 0
    p = layer_period([getattr(layer.attn, "attn_type", None) for layer in layers])
    if len(parts) > 1 and kv_carry.one_body(layers, sharing, parts[0][1], p):  # one scan body for both segments
        stack = _stack(layers, mesh, first=0, owning=parts[0][1] // p, reads=tuple(sharing), per_layer_dim=dim)
        model.layers = nnx.List([stack])
        model.kv_cache_sharing_patterns, model.shared_layer_origins = [0], set()
        if dim:
            model.embedder.__class__ = _whole_per_layer_inputs(type(model.embedder), 1)
        return
    stacks = []
    for s, (first, end) in enumerate(parts):
        stacks.append(
            _stack(
                layers[first:end],
                mesh,
                first=first,
                sources=tuple(sorted(j for j in sources if first <= j < end)),
                reads=tuple(sharing[first:end]) if s else (),
                per_layer_dim=dim,
            )
        )
    model.layers = nnx.List(stacks)
    if len(parts) > 1:  # tunix's loop over the stacks: stack 1 reads the K/V stack 0 returns
        model.kv_cache_sharing_patterns = [0] * len(parts)
        model.shared_layer_origins = {0}
    if dim:
        model.embedder.__class__ = _whole_per_layer_inputs(type(model.embedder), len(parts))


def stacked(model: nnx.Module) -> bool:
    return len(model.layers) > 0 and all(isinstance(layer, LayerStack) for layer in model.layers)
