"""The decoder layers held stacked and run as a `jax.lax.scan` over groups of layers (backend.jax.scan_layers), as
MaxText's scan_layers does: XLA compiles one group's body, and the step's state (frozen weights, LoRA params, the
optimizer's moments) is one [G, ...] array per tensor of a group, so neither the body nor the code around it (the
optimizer's update, the gradients) grows with depth. Tunix's models loop over their layers in Python: unrolled, the
step is traced and compiled layer by layer (the 31B's 60 layers: ~350 s in XLA).

A group is one period P of the layers' attention pattern (the 31B: 5 sliding + 1 global, P = 6, 60 layers = 10
groups): layers p and p + P have the same structure and shapes. `stack_layers(model, mesh)` (in place, once, after
the weights and the initial LoRA are in) turns `model.layers` into one `LayerStack`: the first group's P tunix layers,
each of their Variables holding the G groups' values stacked on a new leading axis (sharded as the layer's was, whole
along the groups), and any layers after the complete groups as they are (Gemma 3 27B's 62 = 10 × 6 + 2). Tunix's
own `__call__` (with Qwix's LoRA interception around it: the LoRA branch and its dropout are in the scan) meets the
stack as its one layer; the stack scans a body that merges the group's graph with one group's slice of the state
and calls its P layers as tunix's loop does (no cache). Remat (tunix's per-layer nnx.remat, crosstune's "dots")
applies per layer inside the body.

State every layer shares, the LoRA dropout's one `nnx.Rngs` stream, is the scan's carry: its count advances through
the groups as it does unrolled, so every draw gets the same key (the same masks). Names: a stacked tensor is
`layers.0.stack.<p>.<rest>` ([G, ...]), a layer after the groups `layers.0.tail.<i>.<rest>`; `per_layer` turns such
names back into tunix's `layers.<i>.<rest>` (a checkpoint's export, the run's adapter).

Refused (a clear error): layers that share KV caches or take per-layer inputs (Gemma 4 E models).
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from crosstune.errors import CrosstuneError

SHARED = nnx.RngState  # what every layer refers to (the dropout stream): the scan's carry, never stacked
STACKED_NAME = re.compile(r"layers\.0\.stack\.(\d+)\.")  # crosstune.train.jax.lora.param_name of a stacked tensor
TAIL_NAME = re.compile(r"layers\.0\.tail\.(\d+)\.")


class ScanError(CrosstuneError, ValueError):
    """A model whose layers backend.jax.scan_layers can't stack, or stacked names that don't map back."""


def period(model: nnx.Module) -> int:
    """The smallest P with at least 2 complete groups whose layers' attention types repeat every P layers; all the
    layers (one group, a scan of length 1) when none repeats (a model cut to a few layers, `plan --layers`)."""
    config = model.config
    hint = "set backend.jax.scan_layers: false for this model"
    if getattr(config, "per_layer_input_dim", 0) > 0:
        raise ScanError(f"backend.jax.scan_layers: layers with per-layer inputs (Gemma 4 E sizes) can't scan: {hint}")
    sharing = getattr(model, "kv_cache_sharing_patterns", None)
    if sharing is not None and any(j != i for i, j in enumerate(sharing)):
        raise ScanError(f"backend.jax.scan_layers: layers sharing KV caches (Gemma 4 E sizes) can't scan: {hint}")
    types = [getattr(layer.attn, "attn_type", None) for layer in model.layers]
    n = len(types)
    for p in range(1, n // 2 + 1):
        if all(types[i] == types[i % p] for i in range((n // p) * p)):
            return p
    return n


class LayerStack(nnx.Module):
    """Called like one tunix decoder layer, runs the G·P stacked layers (a scan over G groups) and then the tail."""

    def __init__(self, stack: list, groups: int, tail: dict[str, nnx.Module]) -> None:
        self.stack = nnx.List(stack)
        self.groups = groups
        self.tail = nnx.Dict(tail)

    def __call__(self, x, positions, cache, attention_mask, **kwargs):
        if cache is not None:
            raise ScanError("backend.jax.scan_layers: a stacked model trains and prefills; it keeps no KV cache")
        graphdef, shared, own = nnx.split(self.stack, SHARED, ...)
        arity: list[int] = []

        def run(layers, x):
            for layer in layers:
                out = layer(x, positions, None, attention_mask, **kwargs)
                arity[:] = [len(out)]
                x = out[1]
            return x

        def body(carry, own_g):
            x, shared = carry
            group = nnx.merge(graphdef, shared, own_g)
            x = run(group, x)
            _, shared, own_g = nnx.split(group, SHARED, ...)
            return (x, shared), own_g

        (x, shared), own = jax.lax.scan(body, (x, shared), own)
        nnx.update(self.stack, shared, own)
        x = run([self.tail[k] for k in sorted(self.tail, key=int)], x)
        return (None, x) + (None,) * (arity[0] - 2)  # tunix's (cache, x[, kv]) of a layer


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


def stack_layers(model: nnx.Module, mesh: Mesh) -> None:
    """Hold `model`'s first G·P decoder layers stacked (module docstring), in place; the layers after them stay."""
    p = period(model)
    layers = list(model.layers)
    groups = len(layers) // p
    whole = groups * p
    shapes = [_canonical(layer) for layer in layers[:p]]
    for i in range(p, whole):
        if _canonical(layers[i]) != shapes[i % p]:
            raise ScanError(f"backend.jax.scan_layers: layer {i} is built unlike layer {i % p}, one period before")
    _check_shared(layers)
    firsts = layers[:p]
    for q, first in enumerate(firsts):
        own = {path: v for path, v in _variables(first).items() if not isinstance(v, SHARED)}
        others = [_variables(layers[g * p + q]) for g in range(groups)]
        for path, variable in own.items():
            spec = variable.get_metadata().get("out_sharding")
            variable.set_value(_stacked([o[path].get_value() for o in others], spec, mesh))
            if spec:
                variable.set_metadata(out_sharding=(None, *spec))
    tail = {str(i): layer for i, layer in enumerate(layers) if i >= whole}
    model.layers = nnx.List([LayerStack(firsts, groups, tail)])


def stacked(model: nnx.Module) -> bool:
    return len(model.layers) == 1 and isinstance(model.layers[0], LayerStack)


def layer_name(name: str) -> tuple[str, bool]:
    """(the name with a stacked or tail layer's prefix as one layer's, `layers.<p>.…` for stacked position p;
    whether the tensor is stacked): what a tensor of one layer is, for rules that read names (the optimizer's)."""
    if m := STACKED_NAME.search(name):
        return f"{name[: m.start()]}layers.{m[1]}.{name[m.end() :]}", True
    if m := TAIL_NAME.search(name):
        return f"{name[: m.start()]}layers.{m[1]}.{name[m.end() :]}", False
    return name, False


def per_layer(params: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """{param name: array} with stacked names (`layers.0.stack.<p>.…` of [G, ...], `layers.0.tail.<i>.…`) as tunix's
    per-layer ones (`layers.<g·P + p>.…`, `layers.<i>.…`); other names as they are. P is the number of positions the
    stacked names hold (every layer of a group holds tensors). Refuses (ScanError, naming the tensor) names that
    don't make one layout: positions not 0..P-1, stacked tensors of different group counts or without a group axis,
    two names for one layer's tensor."""
    positions = {int(m[1]) for name in params if (m := STACKED_NAME.match(name))}
    period_ = len(positions)
    if positions != set(range(period_)):
        raise ScanError(f"stacked LoRA names hold group positions {sorted(positions)}: not 0..P-1")
    groups = {name: (value.shape or (None,))[0] for name, value in params.items() if STACKED_NAME.match(name)}
    for name, g in groups.items():
        if g is None or g != next(iter(groups.values())):
            raise ScanError(
                f"{name}: stacked with {g} groups, not as the other stacked tensors ({set(groups.values())})"
            )
    out = {}

    def put(name: str, value, source: str) -> None:
        if name in out:
            raise ScanError(f"{source}: a second tensor for {name}")
        out[name] = value

    for name, value in params.items():
        if m := STACKED_NAME.match(name):
            for g in range(value.shape[0]):
                put(f"layers.{g * period_ + int(m[1])}.{name[m.end() :]}", value[g], name)
        elif m := TAIL_NAME.match(name):
            put(f"layers.{m[1]}.{name[m.end() :]}", value, name)
        else:
            put(name, value, name)
    return out
