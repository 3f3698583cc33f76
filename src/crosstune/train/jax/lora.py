"""JAX runs' LoRA: Qwix params (`layers.N.<module>.<w|kernel>_lora_<a|b>`) <-> LoraWeights (PEFT layout).

- Export: `qwix_to_lora` maps Qwix LoRA params (read from a jax run's checkpoint by
  crosstune.train.jax.checkpoints) through crosstune.families.lora_layout. Every param is consumed or
  the export stops naming it.
- Import: `lora_to_qwix` gives the Qwix params (and gradient masks) that reproduce a PEFT adapter exactly; PEFT k/v
  with different A matrices become a block LoRA of rank 2r on kv_einsum (see lora_layout); `install_lora` puts them
  into a tunix model built with Qwix LoRA on the same targets (crosstune.train.jax.model.build_model).
"""

from __future__ import annotations

import re

import numpy as np

from crosstune.families import get_family
from crosstune.families.base import HF_TARGET_MODULES
from crosstune.families.lora_layout import (
    FUSED,
    SINGLE,
    WEIGHT_NAMES,
    LoraLayoutError,
    fused_block_mask,
    peft_to_qwix,
    qwix_to_peft,
)
from crosstune.families.spec import ModelSpec
from crosstune.run.lora_weights import ExportError, LoraWeights, module_target

LORA_PARAM = re.compile(r"layers\.(\d+)\.((?:attn|mlp)\.\w+?)\.(w|kernel)_lora_([ab])")


def param_name(path) -> str:
    """A pytree key path as a dotted name (`layers.5.attn.k_einsum.w_lora_a`; Variable `.value` wrappers dropped):
    the one spelling of a tunix/Qwix tensor's name."""
    parts = [getattr(k, "key", getattr(k, "idx", getattr(k, "name", k))) for k in path]
    return ".".join(str(p) for p in parts if p != "value")


def qwix_to_lora(params: dict[str, np.ndarray], spec: ModelSpec, *, rank: int, alpha: float) -> LoraWeights:
    """Qwix LoRA params -> LoraWeights (HF names, PEFT layout; targets = those the params adapt: a kv_einsum LoRA
    adapts v as well as k). Refuses, naming it, a param that isn't a LoRA A/B of a known module, an A without its
    B, a module the layer doesn't have, or a shape that doesn't fit."""
    grouped: dict[tuple[int, str], dict[str, np.ndarray]] = {}
    for name, value in params.items():
        m = LORA_PARAM.fullmatch(name)
        if m is None or m.group(2) not in WEIGHT_NAMES or WEIGHT_NAMES[m.group(2)] != m.group(3):
            raise ExportError(f"LoRA param {name!r} is not a Qwix LoRA of a known module (left unconsumed)")
        grouped.setdefault((int(m.group(1)), m.group(2)), {})[m.group(4)] = value
    modules: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for (layer, module), ab in sorted(grouped.items()):
        where = f"layers.{layer}.{module}.{WEIGHT_NAMES[module]}"
        if set(ab) != {"a", "b"}:
            raise ExportError(f"{where}: has lora_{'/'.join(sorted(ab))} only (a LoRA needs both A and B)")
        if layer >= spec.num_layers:
            raise ExportError(f"{where}: layer {layer}, but the base model has {spec.num_layers} layers")
        try:
            pairs = qwix_to_peft(
                module, ab["a"], ab["b"], spec.kind(layer), spec.hidden_size, spec.mlp_dim(layer), rank, where
            )
        except LoraLayoutError as e:
            raise ExportError(str(e)) from None
        present = spec.projection_shapes(layer)
        for target, (a, b) in pairs.items():
            if target not in present:
                raise ExportError(f"{where}: gives a {target} LoRA, but layer {layer} has no {target} projection")
            modules[f"model.layers.{layer}.{HF_TARGET_MODULES[target]}"] = (
                np.asarray(a, np.float32),
                np.asarray(b, np.float32),
            )
    if not modules:
        raise ExportError("no LoRA params in the checkpoint")
    found = tuple(t for t in HF_TARGET_MODULES if any(module_target(n)[1] == t for n in modules))
    return LoraWeights(spec.family, rank, float(alpha), found, modules)


def lora_to_qwix(
    lora: LoraWeights, spec: ModelSpec, shared: bool = True
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """LoraWeights -> ({Qwix param name: array}, {B param name: gradient mask}) for the tunix modules the family
    assigns to `lora.targets`. Every module the model adapts must have its LoRA in `lora`, and every LoRA module must
    land in one (ExportError otherwise). `shared=False`: see lora_layout.peft_to_qwix."""
    fam = get_family(lora.family)
    lora.check(spec, where="import")
    by_layer: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for name, pair in lora.modules.items():
        layer, target = module_target(name)
        by_layer.setdefault(layer, {})[target] = pair
    params: dict[str, np.ndarray] = {}
    masks: dict[str, np.ndarray] = {}
    used: set[tuple[int, str]] = set()
    for layer in range(spec.num_layers):
        pairs = by_layer.get(layer, {})
        for module in fam.tunix_lora_modules(spec, layer, list(lora.targets)):
            covers = FUSED.get(module) or (SINGLE[module],)
            mine = {t: pairs[t] for t in covers if t in pairs}
            where = f"layers.{layer}.{module}"
            if not mine:
                raise ExportError(f"{where}: the JAX model adapts it, but the adapter has no {'/'.join(covers)} LoRA")
            try:
                a, b = peft_to_qwix(
                    module, mine, spec.kind(layer), spec.hidden_size, spec.mlp_dim(layer), where, shared
                )
            except LoraLayoutError as e:
                raise ExportError(str(e)) from None
            if module not in FUSED and a.shape[-1] != lora.rank and module.startswith("mlp."):
                raise ExportError(f"{where}: rank {a.shape[-1]} != {lora.rank}; Qwix's Linear LoRA needs the rule rank")
            weight = f"{where}.{WEIGHT_NAMES[module]}"
            params[f"{weight}_lora_a"], params[f"{weight}_lora_b"] = a, b
            mask = fused_block_mask(module, b.shape, lora.rank)
            if mask is not None:
                masks[f"{weight}_lora_b"] = mask
            used.update((layer, t) for t in mine)
    left = sorted(set((module_target(n)) for n in lora.modules) - used)
    if left:
        layer, target = left[0]
        raise ExportError(
            f"model.layers.{layer}.{HF_TARGET_MODULES[target]}: no tunix module takes this LoRA "
            f"(targets {list(lora.targets)} on a {spec.layer_types[layer]} layer)"
        )
    return params, masks


def install_lora(model, lora: LoraWeights, spec: ModelSpec) -> dict[str, np.ndarray]:
    """Set the Qwix LoRA params of `model` (built with LoRA on `lora.targets`, same rank and alpha) to reproduce
    `lora` exactly; returns the gradient masks of block LoRAs (multiply those params' gradients by them to keep
    them PEFT k/v pairs while training). A block LoRA replaces the param with a wider one, on the same sharding."""
    import jax
    from flax import nnx

    params, masks = lora_to_qwix(lora, spec)
    found = {}
    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.LoRAParam):
            found[".".join(map(str, path))] = node
    missing = sorted(set(params) - set(found))
    extra = sorted(set(found) - set(params))
    if missing or extra:
        raise ExportError(
            f"the JAX model's LoRA params differ from the adapter's: the model lacks {missing[:3]}, "
            f"the adapter lacks {extra[:3]}"
        )
    for name, value in params.items():
        node = found[name]
        old = node.value
        new = np.asarray(value, dtype=old.dtype)
        try:
            node.value = jax.device_put(new, old.sharding)
        except ValueError:  # a wider block LoRA whose rank axis the old sharding can't split
            node.value = jax.device_put(
                new, jax.sharding.NamedSharding(old.sharding.mesh, jax.sharding.PartitionSpec())
            )
    return masks


def widen_block_lora(model, spec: ModelSpec, targets, rank: int) -> list[str]:
    """On an abstract model (ShapeDtypeStruct leaves, built by crosstune.train.jax.model.abstract_model): give
    every fused einsum whose components each have their own LoRA the shape `install_lora` gives it for the run's
    initial LoRA, whose components' A matrices differ: the block LoRA of width c·r (A [..., c·r], B [c·r, c, ...]).
    The compiled step then sees the shapes training sees without drawing the initial LoRA. Returns the widened
    params' names."""
    import jax
    from flax import nnx

    widened = []
    for path, node in nnx.iter_graph(model):
        if not isinstance(node, nnx.LoRAParam):
            continue
        name = ".".join(map(str, path))
        m = LORA_PARAM.fullmatch(name)
        module = m.group(2) if m else None
        if module not in FUSED:
            continue
        present = [t for t in FUSED[module] if t in spec.targets_present(int(m.group(1)), list(targets))]
        if len(present) < 2:
            continue
        width = rank * len(FUSED[module])
        shape = node.value.shape
        shape = (*shape[:-1], width) if m.group(4) == "a" else (width, *shape[1:])
        node.value = jax.ShapeDtypeStruct(shape, node.value.dtype)
        widened.append(name)
    return widened
