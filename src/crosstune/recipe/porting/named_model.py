"""The model a foreign config names and how it is adapted: its identity (family and size, by path or hub id:
crosstune.families.identity), the QLoRA line, LoRA targets resolved against the family's module names, and how an
export names the model."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crosstune import hub
from crosstune.families import FAMILIES, get_family, identity, model_dir_spec
from crosstune.families.base import HF_TARGET_MODULES
from crosstune.families.spec import DTYPE_BYTES, NEUTRAL_TARGETS, ModelSpec
from crosstune.model_configs import read_model_config
from crosstune.patterns import user_pattern
from crosstune.recipe.hub_ids import hub_model_id
from crosstune.recipe.load import resolve_path
from crosstune.recipe.porting.named_data import config_path
from crosstune.recipe.porting.port import ImportRefused, Keys, Port
from crosstune.recipe.porting.typed import foreign_hub_id
from crosstune.units import bytes_to_gb

# QLoRA's base: NF4 weights (4 bits) with double-quantized block scales (0.127 bits per weight: the QLoRA paper's
# figure) in every decoder-layer linear; embeddings and norms stay in bf16.
QLORA_BITS = 4.127


@dataclass(frozen=True)
class ModelId:
    path: str  # what model.path says: a local folder (absolute) or a hub id, written hf://OWNER/NAME (crosstune.hub)
    revision: str | None
    family: str
    size: str | None  # a known size of the family, when the id or config says which
    spec: ModelSpec | None  # the model's shapes: its config when at hand, else the size's
    notes: list[str] = field(default_factory=list, compare=False)  # what the identification assumed


def identify_model(value: str, revision: str | None, config_dir: Path, key: str) -> ModelId:
    """The family and size of the model a config names (`key`): a local folder (relative to the config's folder)
    with its config.json, or a hub id from its cached config or, uncached, its name (crosstune.families.identity).
    Anything else (another model line, a pre-quantized checkpoint, a name crosstune doesn't know) is refused in one
    line saying what it is."""
    local = config_path(value, config_dir)
    folder, is_hub = None, False
    if (local / "config.json").is_file() and revision is None:
        folder, value = local, str(local.resolve())
    elif foreign_hub_id(key, value):
        folder, is_hub = hub.cached_model_config(value, revision), True
    elif local.exists():
        raise ImportRefused(f"{key}: {local} has no config.json: point it at a Hugging Face model folder")
    else:
        raise ImportRefused(f"{key}: {value!r} is neither a model folder ({local}) nor a hub id (owner/name)")
    named = identity.by_name(value) if is_hub else None
    path = hub.hub_ref(value) if is_hub else value  # the recipe's spelling: a hub id is hf://OWNER/NAME
    if folder is None:
        if named is None:
            raise ImportRefused(
                f"{key}: {value} is not a Gemma 3 or Gemma 4 model by its name, and its config.json is not in the hub "
                f"cache to say otherwise: {identity.TRAINED}; to check the config, fetch it with "
                f"`{hub.fetch_command(value, 'model', revision, hub.CONFIG_FILES)}`"
            )
        _refuse_unless_trainable(key, value, named)
        spec = get_family(named.family).spec(named.size) if named.size else None
        return ModelId(path, revision, named.family, named.size, spec)
    found = identity.by_config(read_model_config(folder), FAMILIES)
    _refuse_unless_trainable(key, value, found)
    spec = model_dir_spec(folder, found.family)
    family = get_family(found.family)
    size = next((n for n, s in family.sizes.items() if _same_shape(s, spec)), None)
    model = ModelId(path, revision, family.name, size, spec)
    if named is not None and (named.family, named.size) != (model.family, model.size) and named.size is not None:
        model.notes.append(
            f"{key}: {value}'s name says {named.what}, its config.json a {family.name} "
            f"{size or 'of a size crosstune has no spec for'}: the config's dimensions are used"
        )
    return model


def _refuse_unless_trainable(key: str, value: str, found: identity.Identity) -> None:
    if found.family is None:
        why = f" ({found.refused})" if found.refused else ""
        raise ImportRefused(f"{key}: {value} is {found.what}{why}: {identity.TRAINED}")
    if found.refused:
        raise ImportRefused(f"{key}: {value} is {found.refused}")


def _same_shape(a: ModelSpec, b: ModelSpec) -> bool:
    return (a.hidden_size, a.intermediate_size, a.vocab_size, a.layer_types, a.attention) == (
        b.hidden_size,
        b.intermediate_size,
        b.vocab_size,
        b.layer_types,
        b.attention,
    )


def hf_model(port: Port, take: Keys, source: Path) -> ModelId:
    """The model of a config in transformers' ModelArguments names (TRL, LLaMA-Factory), set in the recipe."""
    name = take("model_name_or_path")
    if name is None:
        raise ImportRefused(f"{source}: model_name_or_path is missing: name the model (a hub id or a folder)")
    revision = take("model_revision")
    model = identify_model(name, None if revision == "main" else revision, source.parent, "model_name_or_path")
    set_model(port, model)
    return model


def set_model(port: Port, model: ModelId) -> None:
    port.set("model.family", model.family)
    port.set("model.path", model.path)
    if model.revision:
        port.set("model.revision", model.revision)
    port.notes += model.notes
    if model.size:
        port.set("model.size", model.size)
    elif model.spec is None:
        port.notes.append(
            f"model.size: {model.path} names no size crosstune knows and its config is not cached: "
            "`plan` needs the config (fetch it) or a model.size"
        )


def set_alpha(port: Port, alpha: float, rank: int, rslora_key: str | None) -> None:
    """lora.alpha; rsLoRA (`rslora_key` set) scales B·A by alpha/√r where crosstune scales by alpha/r: the same
    scale, rewritten."""
    if rslora_key is not None:
        port.notes.append(
            f"{rslora_key}: scale alpha/√r = {alpha:g}/√{rank}, written as lora.alpha {alpha * math.sqrt(rank):g}"
        )
        alpha = alpha * math.sqrt(rank)
    port.set("lora.alpha", float(alpha))


def qlora_line(port: Port, key: str, model: ModelId) -> None:
    """QLoRA's 4-bit base has no crosstune equivalent: the nearest is the bf16 LoRA, and this is what it costs."""
    spec = model.spec
    if spec is None:
        port.miss(
            key,
            "QLoRA's 4-bit NF4 base (bitsandbytes): crosstune trains LoRA on the base in bf16, which "
            "holds 2 bytes per weight where NF4 holds about 0.5",
            "LoRA on a bf16 base: run `crosstune plan` on the recipe for the memory per device",
        )
        return
    bf16 = bytes_to_gb(spec.total_params * DTYPE_BYTES["bfloat16"])
    layers = spec.non_embedding_params
    nf4 = bytes_to_gb(layers * QLORA_BITS / 8 + (spec.total_params - layers) * DTYPE_BYTES["bfloat16"])
    port.miss(
        key,
        f"QLoRA's 4-bit NF4 base (bitsandbytes): `crosstune plan` holds {spec.name}'s base in bf16, "
        f"{bf16:.1f} GB per device unsharded, where NF4 holds about {nf4:.1f} GB (+{bf16 - nf4:.1f} GB; FSDP or "
        "the jax mesh divides it)",
        "LoRA on a bf16 base (model.dtype bfloat16); `crosstune plan` on the "
        "written recipe shows whether the hardware holds it",
    )


def model_ref(recipe: Any) -> str:
    """How an exported config names the recipe's model: its hub id, or its folder as an absolute path."""
    repo = hub_model_id(recipe.model.path)
    if repo is not None or recipe.model.path is None:
        return repo or f"<a {recipe.model.family} {recipe.model.size} checkpoint: set model.path>"
    return str(resolve_path(recipe, recipe.model.path))


# --- LoRA targets -------------------------------------------------------------------------------------------------
LM_PREFIXES = ("model.layers.", "model.language_model.layers.")  # text-only and multimodal checkpoints


def resolve_targets(port: Port, key: str, value: Any, model: ModelId) -> None:
    """`value` (PEFT's target_modules: a regex matched whole against each module name, a list of names matched at
    the end, or "all-linear") as crosstune's neutral targets, resolved against the family's decoder-layer modules.
    Matching no module is refused by name; matching a part crosstune can't adapt alone is listed."""
    family = get_family(model.family)
    spec = model.spec or next(iter(family.sizes.values()))
    names = {
        f"{prefix}{i}.{HF_TARGET_MODULES[t]}": (i, t)
        for prefix in LM_PREFIXES
        for i in range(spec.num_layers)
        for t in spec.targets_present(i, NEUTRAL_TARGETS)
    }
    extra = ["lm_head", "model.embed_tokens", "model.language_model.embed_tokens"]
    if value == "all-linear":
        matched, others = set(names), []
    else:
        match = _matcher(key, value)
        matched = {n for n in names if match(n)}
        others = [n for n in extra if match(n)]
    if not matched:
        shown = ", ".join(f"model.language_model.layers.N.{HF_TARGET_MODULES[t]}" for t in NEUTRAL_TARGETS)
        raise ImportRefused(f"{key}: {value!r} matches none of {model.family}'s decoder-layer modules ({shown})")
    layers: dict[str, set[int]] = {}
    for n in matched:
        i, t = names[n]
        layers.setdefault(t, set()).add(i)
    targets = [t for t in NEUTRAL_TARGETS if t in layers]
    for t in targets:
        present = {i for i in range(spec.num_layers) if t in spec.targets_present(i, [t])}
        if layers[t] != present and model.spec is not None:
            port.miss(
                key,
                f"adapts {HF_TARGET_MODULES[t]} in {len(layers[t])} of its {len(present)} layers",
                f"lora.targets adapts {t} in every layer that has it",
            )
    if others:
        port.miss(
            key, f"also matches {', '.join(others)}: crosstune adapts decoder-layer projections only", "lora.targets"
        )
    if ("k" in targets) != ("v" in targets):
        has, added = ("k", "v") if "k" in targets else ("v", "k")
        targets = [t for t in NEUTRAL_TARGETS if t in {*targets, added}]
        port.miss(
            key,
            f"adapts {has} without {added}: tunix fuses k and v into one kv_einsum, so both backends "
            f"adapt them together",
            f"lora.targets {targets} (adds {added})",
        )
    port.set("lora.targets", targets)


def _matcher(key: str, value: Any):
    if isinstance(value, str):  # matched whole under a bound on its work (crosstune.patterns)
        return user_pattern(value, key)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return lambda name: any(name == v or name.endswith("." + v) for v in value)
    raise ImportRefused(f"{key}: {value!r} is neither a module-name regex nor a list of module names")
