"""Tunix Gemma on a (fsdp, tp) mesh: the mesh context, sharded loading from HF safetensors, Qwix LoRA, and the
checks for the pitfalls of tunix 0.1.7 / qwix 0.1.8 / flax 0.12 (shared/notes/stacks.md), fixed here once:

- mesh context: tunix reads the legacy `with mesh:` context; without it inputs and optimizer state stay unsharded.
- AxisType.Auto: jax 0.10's default Explicit axes break tunix's embedding lookup.
- `flax_always_shard_variable` is off once tunix is imported: the model is built abstractly (`nnx.eval_shape`) and
  every tensor is placed with its NamedSharding as it is read.
- heads that tp can't divide: `fit_shardings` replicates exactly those tensor axes (the planner predicts the same
  list and its memory cost) instead of an XLA IndivisibleError.
- LoRA leaves: every PartitionSpec must fit its array's rank (qwix <= 0.1.5 gave 2-D LoRA leaves 4-D specs).
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding

from crosstune.families import get_family
from crosstune.families.spec import ModelSpec
from crosstune.families.tunix_config import tunix_model_class, tunix_model_config
from crosstune.families.tunix_weights import CheckpointReader, tunix_tensor

AXES = ("fsdp", "tp")


def make_mesh(fsdp: int, tp: int) -> Mesh:
    """A (fsdp, tp) mesh over the first fsdp·tp devices, with Auto axes."""
    devices = jax.devices()
    if fsdp * tp > len(devices):
        raise ValueError(f"mesh fsdp×tp = {fsdp}×{tp} needs {fsdp * tp} devices; JAX sees {len(devices)}")
    return jax.make_mesh((fsdp, tp), AXES, axis_types=(AxisType.Auto,) * 2, devices=devices[: fsdp * tp])


@contextlib.contextmanager
def mesh_context(mesh: Mesh) -> Iterator[Mesh]:
    """The legacy mesh context tunix 0.1.7 reads (pxla.thread_resources); `jax.set_mesh` alone trains but shards
    neither the input batches nor the optimizer state."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # jax deprecates `with mesh:`; tunix still needs it
        mesh.__enter__()
    try:
        yield mesh
    finally:
        mesh.__exit__(None, None, None)


@dataclass(frozen=True)
class Replicated:
    """A tensor axis that the mesh can't split evenly, kept whole on every device of that mesh axis."""

    path: str
    shape: tuple[int, ...]
    axis: int
    mesh_axes: tuple[str, ...]


def _axes(entry) -> tuple[str, ...]:
    return () if entry is None else (entry if isinstance(entry, tuple) else (entry,))


def fit_shardings(model: nnx.Module, mesh: Mesh) -> list[Replicated]:
    """Drop the mesh axes that don't divide a tensor dimension from its sharding metadata (in place)."""
    out: list[Replicated] = []
    for path, node in nnx.iter_graph(model):
        if not isinstance(node, nnx.Variable):
            continue
        spec = node.get_metadata().get("out_sharding")
        if not spec:
            continue
        new = list(spec)
        for i, entry in enumerate(spec):
            names = _axes(entry)
            if names and node.shape[i] % math.prod(mesh.shape[a] for a in names):
                new[i] = None
                out.append(Replicated(".".join(map(str, path)), tuple(node.shape), i, names))
        if new != list(spec):
            node.set_metadata(out_sharding=tuple(new))
    return out


def _key(path) -> str:
    return ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def load_base_model(
    family: str, model_dir: Path, mesh: Mesh, *, dtype: str = "float32", remat: bool = False
) -> tuple[nnx.Module, list[Replicated]]:
    """The tunix model of an HF checkpoint directory, each tensor read once and placed with its sharding."""
    reader = CheckpointReader(Path(model_dir))
    config = tunix_model_config(family, reader.config(), dtype=dtype, remat=remat)
    cls = tunix_model_class(family)
    with mesh_context(mesh):
        abstract = nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(params=0)))
    replicated = fit_shardings(abstract, mesh)
    graphdef, state = nnx.split(abstract)
    shardings = nnx.get_named_sharding(state, mesh).to_pure_dict()
    host_dtype = np.dtype(jnp.dtype(config.param_dtype))

    def place(path, leaf: jax.ShapeDtypeStruct, sharding: NamedSharding) -> jax.Array:
        host = np.asarray(tunix_tensor(reader, _key(path), leaf.shape), dtype=host_dtype)
        return jax.make_array_from_callback(leaf.shape, sharding, lambda index: host[index])

    nnx.replace_by_pure_dict(state, jax.tree.map_with_path(place, state.to_pure_dict(), shardings))
    return nnx.merge(graphdef, state), replicated


def lora_module_regex(family: str, spec: ModelSpec, targets: list[str]) -> str:
    """Qwix `module_path` regex for the neutral targets, through the family's tunix module names."""
    names = sorted({m for layer in range(spec.num_layers) for m in get_family(family).tunix_lora_modules(spec, layer, targets)})
    return r"layers/\d+/(?:" + "|".join(re.escape(n.replace(".", "/")) for n in names) + ")"


def lora_modules(model: nnx.Module) -> set[str]:
    """Dotted paths of the modules that carry LoRA (`layers.5.attn.k_einsum`)."""
    found = set()
    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.LoRAParam):
            found.add(".".join(map(str, path[:-1])))
    return found


def apply_lora(model: nnx.Module, family: str, spec: ModelSpec, lora, mesh: Mesh, seed: int) -> nnx.Module:
    """Qwix LoRA on the recipe's targets; LoRA params kept in float32 whatever the base dtype (as PEFT does:
    AdamW state of bf16 LoRA weights loses small updates)."""
    import qwix

    provider = qwix.LoraProvider(
        module_path=lora_module_regex(family, spec, list(lora.targets)),
        rank=lora.rank,
        alpha=float(lora.alpha),
        dropout=lora.dropout,
    )
    with mesh_context(mesh):
        model = qwix.apply_lora_to_model(
            model, provider, rngs=nnx.Rngs(params=seed, dropout=seed), **model.get_model_input()
        )
    expected = {
        f"layers.{layer}.{m}"
        for layer in range(spec.num_layers)
        for m in get_family(family).tunix_lora_modules(spec, layer, list(lora.targets))
    }
    got = lora_modules(model)
    if got != expected:
        raise RuntimeError(
            f"qwix adapted {sorted(got - expected)[:4]} unexpectedly and missed {sorted(expected - got)[:4]}: "
            "the family's tunix module names disagree with the model"
        )
    lora_state = nnx.state(model, nnx.LoRAParam)
    nnx.update(model, jax.tree.map(lambda x: x.astype(jnp.float32), lora_state))
    return model


def sharding_problems(tree, mesh: Mesh) -> list[str]:
    """Leaves whose sharding is not a NamedSharding on `mesh`, or whose PartitionSpec is longer than their rank
    or splits an axis unevenly. `tree` is an nnx.State (LoRA params, optimizer state) or any pytree of arrays."""
    problems = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if not hasattr(leaf, "sharding"):
            continue
        name, sharding = _key(path), leaf.sharding
        if not isinstance(sharding, NamedSharding) or sharding.mesh.shape != mesh.shape:
            problems.append(f"{name}: {sharding} is not a NamedSharding on the {dict(mesh.shape)} mesh")
            continue
        spec = tuple(sharding.spec)
        if len(spec) > leaf.ndim:
            problems.append(f"{name}: PartitionSpec {spec} has rank {len(spec)} > ndim {leaf.ndim}")
            continue
        for dim, entry in zip(leaf.shape, spec, strict=False):
            size = math.prod(mesh.shape[a] for a in _axes(entry))
            if dim % size:
                problems.append(f"{name}: dimension {dim} split {size} ways by {entry}")
    return problems


def spec_problems(model: nnx.Module) -> list[str]:
    """LoRA params whose `out_sharding` metadata is longer than the array's rank (qwix <= 0.1.5 + flax >= 0.12.4)."""
    problems = []
    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.LoRAParam):
            spec = node.get_metadata().get("out_sharding") or ()
            if len(spec) > len(node.shape):
                problems.append(f"{'.'.join(map(str, path))}: spec {spec} on a rank-{len(node.shape)} array")
    return problems
