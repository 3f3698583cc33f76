"""Tunix Gemma on a (fsdp, tp) mesh: the mesh context, sharded loading from HF safetensors, Qwix LoRA, and the
checks for the pitfalls of tunix 0.1.7 / qwix 0.1.8 / flax 0.12 (docs/TUNIX_LAYOUT.md), fixed here once:

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
import dataclasses
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
from crosstune.recipe.schema import LoraSection
from crosstune.train.jax.config import REMAT_MODES
from crosstune.train.jax.lora import install_lora, param_name
from crosstune.train.jax.moe import route_on_residual
from crosstune.train.jax.tracing import linear_tracing
from crosstune.train.lora_init import initial_lora

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


def abstract_model(
    family: str,
    hf_config: dict,
    mesh: Mesh,
    *,
    dtype: str = "float32",
    compute_dtype: str | None = None,
    remat: bool | str | None = False,
    lora: LoraSection | None = None,
    seed: int = 0,
    attention: str = "dense",
    splash_block: int = 512,
    splash_fused_backward: bool = True,
    platform: str | None = None,
    lora_provider: str = "crosstune",
) -> tuple[nnx.Module, list[Replicated]]:
    """The tunix model of an HF config (a config.json dict) with Qwix LoRA on `lora.targets`, built abstractly:
    every leaf a ShapeDtypeStruct, nothing allocated, shardings fitted to `mesh` (in the variables' metadata).
    The LoRA leaves have Qwix's own rank-r shapes and are float32 (as PEFT keeps them, whatever the base's dtype);
    `build_model` then installs the run's initial LoRA.
    `remat`: crosstune.train.jax.remat's mode (True = "full"); `attention`: "dense" (tunix's masked attention) or
    "splash" (crosstune.train.jax.attention), its kernel compiled for `platform` (default: JAX's backend);
    `lora_provider`: "crosstune" (crosstune.train.jax.lora_provider) or "qwix" (Qwix's own, a benchmark's
    baseline)."""
    linear_tracing()  # Qwix's LoRA params are made while tracing a forward pass (crosstune.train.jax.tracing)
    # Built without remat: Qwix creates the LoRA params while tracing a forward pass, and under tunix's nnx.remat
    # (graph_updates=False) the params it creates inside the layers are dropped. Remat is switched on after.
    config = tunix_model_config(family, hf_config, dtype=dtype, compute_dtype=compute_dtype, remat=False)
    cls = tunix_model_class(family)
    rule = None if lora is None else _lora_rule(family, lora, hf_config)
    with mesh_context(mesh):
        model = nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(params=0)))
        route_on_residual(model)  # Gemma 4 MoE layers: transformers' router input (crosstune.train.jax.moe)
        if rule is not None:
            import qwix

            from crosstune.train.jax.lora_provider import LoraProvider

            provider = (LoraProvider if lora_provider == "crosstune" else qwix.LoraProvider)([rule])
            model = nnx.eval_shape(
                lambda m: qwix.apply_lora_to_model(
                    m, provider, rngs=nnx.Rngs(params=seed, dropout=seed), **m.get_model_input()
                ),
                model,
            )
    if lora is not None:
        _check_lora_modules(model, family, hf_config, lora)
        for _, node in nnx.iter_graph(model):  # Qwix makes them in the base's dtype; crosstune keeps them fp32
            if isinstance(node, nnx.LoRAParam):
                node.value = jax.ShapeDtypeStruct(node.value.shape, jnp.float32)
    apply_remat(model, family, hf_config, remat)
    if attention == "splash":
        from crosstune.train.jax.attention import use_splash

        use_splash(
            model,
            interpret=(platform or jax.default_backend()) != "tpu",
            block=splash_block,
            fused=splash_fused_backward,
        )
    return model, fit_shardings(model, mesh)


def build_model(
    family: str,
    model_dir: Path,
    mesh: Mesh,
    *,
    dtype: str = "float32",
    compute_dtype: str | None = None,
    remat: bool | str | None = False,
    lora: LoraSection | None = None,
    seed: int = 0,
    attention: str = "dense",
    splash_block: int = 512,
    splash_fused_backward: bool = True,
    lora_provider: str = "crosstune",
) -> tuple[nnx.Module, list[Replicated]]:
    """The tunix model of an HF checkpoint directory, with Qwix LoRA on `lora.targets` when `lora` is given.

    Built abstractly first (`abstract_model`: no eager forward, no allocation), then each base tensor read once
    from the checkpoint straight into its NamedSharding. The LoRA is the run's initial LoRA
    (crosstune.train.lora_init, seeded by `seed`: the same arrays the torch backend installs), fused k/v einsums in
    the rank-2r block form. LoRA params are float32 whatever the base dtype (as PEFT keeps them: AdamW state of
    bf16 LoRA weights loses small updates).
    """
    reader = CheckpointReader(Path(model_dir))
    model, replicated = abstract_model(
        family,
        reader.config(),
        mesh,
        dtype=dtype,
        compute_dtype=compute_dtype,
        remat=remat,
        lora=lora,
        seed=seed,
        attention=attention,
        splash_block=splash_block,
        splash_fused_backward=splash_fused_backward,
        lora_provider=lora_provider,
    )
    graphdef, lora_state, base_state = nnx.split(model, nnx.LoRAParam, ...)
    host_dtype = np.dtype(jnp.dtype(dtype))

    def place(path, leaf: jax.ShapeDtypeStruct, sharding: NamedSharding) -> jax.Array:
        host = np.asarray(tunix_tensor(reader, param_name(path), leaf.shape), dtype=host_dtype)
        return jax.make_array_from_callback(leaf.shape, sharding, lambda index: host[index])

    base = jax.tree.map_with_path(
        place, base_state.to_pure_dict(), nnx.get_named_sharding(base_state, mesh).to_pure_dict()
    )
    nnx.replace_by_pure_dict(base_state, base)
    if lora is not None:
        nnx.replace_by_pure_dict(lora_state, _zeros(lora_state, mesh))
    model = nnx.merge(graphdef, lora_state, base_state)
    if lora is not None:
        _install_initial_lora(model, family, reader, lora, seed)
        if lora.dropout > 0:
            model.set_attributes(qwix_rngs=nnx.Rngs(dropout=seed))  # qwix unsets the rngs it was applied with
    return model, replicated


def apply_remat(model: nnx.Module, family: str, hf_config: dict, remat: bool | str | None) -> None:
    """Switch on the activation recompute `remat` names (crosstune.train.jax.config.REMAT_MODES), in place."""
    from crosstune.train.jax.remat import save_matmuls

    mode = {True: "full", False: None}.get(remat, remat) if isinstance(remat, bool) else remat
    if mode is None:
        return
    if mode == "full":
        _set_remat(model, tunix_model_config(family, hf_config, remat=True).remat_config)
    elif mode in ("dots", "dots_and_attention"):
        save_matmuls(model, keep_attention=mode == "dots_and_attention")
    else:
        known = ", ".join(m for m in REMAT_MODES if m)
        raise ValueError(f"activation recompute {mode!r}: the jax backend knows {known} (or none)")


def _set_remat(model: nnx.Module, remat_config) -> None:
    """Every tunix module's remat setting (its config's, and the attention layers' own copy) -> `remat_config`."""
    for _, module in model.iter_modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "remat_config"):
            module.config = dataclasses.replace(config, remat_config=remat_config)
        if hasattr(module, "remat_config"):
            module.remat_config = remat_config


def _lora_rule(family: str, lora: LoraSection, hf_config: dict):
    import qwix

    spec = get_family(family).spec_from_hf_config(hf_config)
    return qwix.LoraRule(
        module_path=lora_module_regex(family, spec, list(lora.targets)),
        rank=lora.rank,
        alpha=float(lora.alpha),
        dropout=lora.dropout,
    )


def _zeros(lora_state: nnx.State, mesh: Mesh) -> dict:
    """float32 zeros in every LoRA leaf's sharding (LoRA stays float32 whatever the base dtype)."""
    values = jax.tree.map(lambda x: np.zeros(x.shape, np.float32), lora_state.to_pure_dict())
    return jax.device_put(values, nnx.get_named_sharding(lora_state, mesh).to_pure_dict())


def _install_initial_lora(model: nnx.Module, family: str, reader: CheckpointReader, lora: LoraSection, seed: int):
    """The run's initial LoRA, drawn once in the neutral PEFT layout (crosstune.train.lora_init, the torch backend
    installs the same arrays): fused k/v einsums get the exact rank-2r block form (separate A for k and v), whose
    off-diagonal blocks the optimizer keeps at zero (jax_step.keep_block_lora_diagonal)."""

    spec = get_family(family).spec_from_hf_config(reader.config())
    install_lora(model, initial_lora(spec, lora.rank, lora.alpha, lora.targets, seed), spec)


def lora_module_regex(family: str, spec: ModelSpec, targets: list[str]) -> str:
    """Qwix `module_path` regex for the neutral targets, through the family's tunix module names."""
    fam = get_family(family)
    names = sorted({m for layer in range(spec.num_layers) for m in fam.tunix_lora_modules(spec, layer, targets)})
    return r"layers/\d+/(?:" + "|".join(re.escape(n.replace(".", "/")) for n in names) + ")"


def lora_modules(model: nnx.Module) -> set[str]:
    """Dotted paths of the modules that carry LoRA (`layers.5.attn.k_einsum`)."""
    return {".".join(map(str, path[:-1])) for path, node in nnx.iter_graph(model) if isinstance(node, nnx.LoRAParam)}


def _check_lora_modules(model: nnx.Module, family: str, hf_config: dict, lora: LoraSection) -> None:
    fam = get_family(family)
    spec = fam.spec_from_hf_config(hf_config)
    targets = list(lora.targets)
    expected = {f"layers.{i}.{m}" for i in range(spec.num_layers) for m in fam.tunix_lora_modules(spec, i, targets)}
    got = lora_modules(model)
    if got != expected:
        raise RuntimeError(
            f"qwix adapted {sorted(got - expected)[:4]} unexpectedly and missed {sorted(expected - got)[:4]}: "
            f"the {family} family's tunix module names disagree with the model"
        )


def sharding_problems(tree, mesh: Mesh) -> list[str]:
    """Array leaves (rank >= 1) whose sharding is not a NamedSharding on `mesh`, or whose PartitionSpec is longer
    than their rank or splits an axis unevenly. `tree`: an nnx.State (LoRA params, optimizer state) or any pytree."""
    problems = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if not hasattr(leaf, "sharding") or leaf.ndim == 0:  # scalars (step counts) are replicated when jitted
            continue
        name, sharding = param_name(path), leaf.sharding
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


def optimizer_sharding_mismatches(optimizer, model: nnx.Module) -> list[str]:
    """Optimizer-state leaves (AdamW moments) whose sharding differs from their LoRA parameter's."""
    params = {
        param_name(p): x.sharding for p, x in jax.tree_util.tree_leaves_with_path(nnx.state(model, nnx.LoRAParam))
    }
    problems = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(optimizer, nnx.optimizer.OptState)):
        name = param_name(path)
        parts = name.split(".")
        param = next((".".join(parts[i:]) for i in range(len(parts)) if ".".join(parts[i:]) in params), None)
        if param and leaf.ndim and not leaf.sharding.is_equivalent_to(params[param], leaf.ndim):
            problems.append(f"{name}: {leaf.sharding.spec} but the parameter has {params[param].spec}")
    return problems


def place_state(obj, mesh: Mesh) -> None:
    """Move every state leaf of `obj` (model or optimizer) to its metadata sharding, scalars replicated, so that
    the first jitted step sees the same input shardings as all later ones (no second compilation)."""
    state = nnx.state(obj)
    nnx.update(obj, jax.device_put(state, nnx.get_named_sharding(state, mesh)))
