"""What importing and exporting a user's Axolotl or TRL config share: the model named by path or hub id (its family
and size), LoRA targets resolved against the family's module names, the hardware a study runs on, and the list of
what did not carry over (one line each: the key, why, the nearest crosstune setting).

The formats' own keys live in crosstune.recipe.axolotl_format and crosstune.recipe.trl_format."""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crosstune import hub
from crosstune.errors import CrosstuneError
from crosstune.families import FAMILIES, get_family, identity, model_dir_spec
from crosstune.families.base import HF_TARGET_MODULES
from crosstune.families.spec import DTYPE_BYTES, NEUTRAL_TARGETS, ModelSpec
from crosstune.hardware import HARDWARE
from crosstune.recipe.hub_ids import hub_model_id
from crosstune.units import bytes_to_gb
from crosstune.untrusted_files import jsonl_rows, read_model_config

# QLoRA's base: NF4 weights (4 bits) with double-quantized block scales (0.127 bits per weight: the QLoRA paper's
# figure) in every decoder-layer linear; embeddings and norms stay in bf16.
QLORA_BITS = 4.127
HUB_PART = 96  # characters of a hub id's owner or name (huggingface_hub's rule)


class ImportRefused(CrosstuneError):
    """A config crosstune can't train as written: another model family, a full fine-tune, no readable data, LoRA
    targets that match no module; the message names the key."""


@dataclass(frozen=True)
class Unmapped:
    """A key of the user's config without a crosstune equivalent (or ignored: it changes no trained number)."""

    key: str
    reason: str
    nearest: str = ""
    ignored: bool = False

    def render(self) -> str:
        head = "ignored" if self.ignored else "not mapped"
        tail = f" (nearest: {self.nearest})" if self.nearest else ""
        return f"{head}: {self.key}: {self.reason}{tail}"


@dataclass
class Port:
    """A conversion under way: the recipe (nested dicts) built so far, what did not carry over, and notes on what
    carried over with an assumption."""

    source: Path
    tool: str
    recipe: dict[str, Any] = field(default_factory=dict)
    unmapped: list[Unmapped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def set(self, path: str, value: Any) -> None:
        node = self.recipe
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    def get(self, path: str, default: Any = None) -> Any:
        node: Any = self.recipe
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def miss(self, key: str, reason: str, nearest: str = "") -> None:
        self.unmapped.append(Unmapped(key, reason, nearest))

    def ignore(self, key: str, reason: str) -> None:
        self.unmapped.append(Unmapped(key, reason, ignored=True))

    @property
    def differences(self) -> list[Unmapped]:
        """The unmapped keys that change what is trained or how (ignored ones don't)."""
        return [u for u in self.unmapped if not u.ignored]


TOOL_KEYS = {"axolotl": "an Axolotl key", "trl": "a TRL key"}
LOGGING_PREFIXES = ("wandb_", "mlflow_", "comet_", "swanlab_", "trackio_")


class Keys:
    """A config's keys with its tool's defaults under them (`defaults`), and which ones the mapping read."""

    def __init__(self, cfg: dict[str, Any], defaults: dict[str, Any]):
        self.given = {k: v for k, v in cfg.items() if v is not None and v != ""}
        self.defaults, self.used = defaults, set()

    def __call__(self, key: str) -> Any:
        self.used.add(key)
        return self.given.get(key, self.defaults.get(key))

    def rest(self, port: Port, ignored: dict[str, str]) -> None:
        """Every key the mapping did not read: ignored (with why: by name, or a logging service's prefix) or not
        mapped."""
        for key, value in self.given.items():
            if key in self.used or value in (False, [], {}):  # a switch left off, an empty list: nothing to map
                continue
            if key in ignored:
                port.ignore(key, ignored[key])
            elif key.startswith(LOGGING_PREFIXES):
                port.ignore(key, "an experiment tracker's setting; crosstune writes metrics.jsonl and TensorBoard")
            else:
                port.miss(key, f"{TOOL_KEYS[port.tool]} crosstune's mapping does not carry")


# --- the model ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelId:
    path: str  # what model.path says: a local folder (absolute) or a hub id
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
    local = Path(value).expanduser()
    local = local if local.is_absolute() else config_dir / local
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
    if folder is None:
        if named is None:
            raise ImportRefused(
                f"{key}: {value} is not a Gemma 3 or Gemma 4 model by its name, and its config.json is not in the hub "
                f"cache to say otherwise: {identity.TRAINED}; to check the config, fetch it with "
                f"`{hub.fetch_command(value, 'model', revision, hub.CONFIG_FILES)}`"
            )
        _refuse_unless_trainable(key, value, named)
        spec = get_family(named.family).spec(named.size) if named.size else None
        return ModelId(value, revision, named.family, named.size, spec)
    found = identity.by_config(read_model_config(folder), FAMILIES)
    _refuse_unless_trainable(key, value, found)
    spec = model_dir_spec(folder, found.family)
    family = get_family(found.family)
    size = next((n for n, s in family.sizes.items() if _same_shape(s, spec)), None)
    model = ModelId(value, revision, family.name, size, spec)
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


def foreign_hub_id(key: str, value: str) -> bool:
    """Whether a foreign config's `value` names a hub id (owner/name): one that has the shape but breaks the
    hub's rule (ASCII letters, digits, '-', '_', '.'; at most 96 characters a part) is refused by name."""
    if hub.is_hub_id(value):
        parts = value.split("/")
        odd = sorted({c for c in value if not (c.isascii() and (c.isalnum() or c in "-_./"))})
        if odd:
            raise ImportRefused(
                f"{key}: {value!r} is not a hub id: the hub's ids are ASCII letters, digits, '-', '_' "
                f"and '.' (this one has {', '.join(map(repr, odd))})"
            )
        if max(len(p) for p in parts) > HUB_PART:
            raise ImportRefused(
                f"{key}: {value[:40]!r}... is not a hub id: an owner or name has at most {HUB_PART} "
                f"characters (this one {max(len(p) for p in parts):,})"
            )
        return True
    return False


def _same_shape(a: ModelSpec, b: ModelSpec) -> bool:
    return (a.hidden_size, a.intermediate_size, a.vocab_size, a.layer_types, a.attention) == (
        b.hidden_size, b.intermediate_size, b.vocab_size, b.layer_types, b.attention
    )  # fmt: skip


def set_model(port: Port, model: ModelId) -> None:
    port.set("model.family", model.family)
    port.set("model.path", model.path)
    if model.revision:
        port.set("model.revision", model.revision)
    port.notes += model.notes
    if model.size:
        port.set("model.size", model.size)
    elif model.spec is None:
        port.notes.append(f"model.size: {model.path} names no size crosstune knows and its config is not cached: "
                          "`plan` needs the config (fetch it) or a model.size")  # fmt: skip


def qlora_line(port: Port, key: str, model: ModelId) -> None:
    """QLoRA's 4-bit base has no crosstune equivalent: the nearest is the bf16 LoRA, and this is what it costs."""
    spec = model.spec
    if spec is None:
        port.miss(key, "QLoRA's 4-bit NF4 base (bitsandbytes): crosstune trains LoRA on the base in bf16, which "
                  "holds 2 bytes per weight where NF4 holds about 0.5", "LoRA on a bf16 base: run `crosstune plan` "
                  "on the recipe for the memory per device")  # fmt: skip
        return
    bf16 = bytes_to_gb(spec.total_params * DTYPE_BYTES["bfloat16"])
    layers = spec.non_embedding_params
    nf4 = bytes_to_gb(layers * QLORA_BITS / 8 + (spec.total_params - layers) * DTYPE_BYTES["bfloat16"])
    port.miss(key, f"QLoRA's 4-bit NF4 base (bitsandbytes): `crosstune plan` holds {spec.name}'s base in bf16, "
              f"{bf16:.1f} GB per device unsharded, where NF4 holds about {nf4:.1f} GB (+{bf16 - nf4:.1f} GB; FSDP or "
              "the jax mesh divides it)", "LoRA on a bf16 base (model.dtype bfloat16); `crosstune plan` on the "
              "written recipe shows whether the hardware holds it")  # fmt: skip


def model_ref(recipe: Any) -> str:
    """How an exported config names the recipe's model: its hub id, or its folder as an absolute path."""
    repo = hub_model_id(recipe.model.path, recipe.model.revision, recipe.base_dir)
    if repo is not None or recipe.model.path is None:
        return repo or f"<a {recipe.model.family} {recipe.model.size} checkpoint: set model.path>"
    p = Path(recipe.model.path).expanduser()
    return str(p if p.is_absolute() or recipe.base_dir is None else (recipe.base_dir / p).resolve())


# --- LoRA targets -------------------------------------------------------------------------------------------------
LM_PREFIXES = ("model.layers.", "model.language_model.layers.")  # text-only and multimodal checkpoints


def resolve_targets(port: Port, key: str, value: Any, model: ModelId) -> None:
    """`value` (PEFT's target_modules: a regex matched whole against each module name, a list of names matched at
    the end, or "all-linear") as crosstune's neutral targets, resolved against the family's decoder-layer modules.
    Matching no module is refused by name; matching a part crosstune can't adapt alone is listed."""
    family = get_family(model.family)
    spec = model.spec or next(iter(family.sizes.values()))
    names = {f"{prefix}{i}.{HF_TARGET_MODULES[t]}": (i, t) for prefix in LM_PREFIXES for i in range(spec.num_layers)
             for t in spec.targets_present(i, NEUTRAL_TARGETS)}  # fmt: skip
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
            port.miss(key, f"adapts {HF_TARGET_MODULES[t]} in {len(layers[t])} of its {len(present)} layers",
                      f"lora.targets adapts {t} in every layer that has it")  # fmt: skip
    if others:
        port.miss(key, f"also matches {', '.join(others)}: crosstune adapts decoder-layer projections only",
                  "lora.targets")  # fmt: skip
    if ("k" in targets) != ("v" in targets):
        has, added = ("k", "v") if "k" in targets else ("v", "k")
        targets = [t for t in NEUTRAL_TARGETS if t in {*targets, added}]
        port.miss(key, f"adapts {has} without {added}: tunix fuses k and v into one kv_einsum, so both backends "
                  f"adapt them together", f"lora.targets {targets} (adds {added})")  # fmt: skip
    port.set("lora.targets", targets)


def _matcher(key: str, value: Any):
    if isinstance(value, str):
        try:
            pattern = re.compile(value)
        except re.error as e:
            raise ImportRefused(f"{key}: {value!r} is not a regular expression ({e})") from None
        return lambda name: pattern.fullmatch(name) is not None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return lambda name: any(name == v or name.endswith("." + v) for v in value)
    raise ImportRefused(f"{key}: {value!r} is neither a module-name regex nor a list of module names")


# --- hardware -----------------------------------------------------------------------------------------------------
def set_hardware(port: Port, hardware: str | None, model: ModelId) -> None:
    """The target a study runs on: a TPU gets the jax backend on a mesh of its chips (the widest tp that splits
    every head group, fsdp the rest), a GPU box the torch backend on its GPUs; none given keeps this CPU."""
    if hardware is None:
        port.notes.append("hardware: cpu (give --hardware, e.g. tpu-v5p-8, for the target the study runs on)")
        return
    hw = HARDWARE.get(hardware)
    if hw is None:
        raise ImportRefused(f"--hardware {hardware!r}: not a named target ({', '.join(HARDWARE)})")
    port.set("hardware", hardware)
    if hw.chip.platform == "tpu":
        spec = model.spec
        tps = [t for t in (spec.shardable_tps(hw.devices) if spec else [1]) if hw.devices % t == 0]
        tp = max(tps)
        port.set("backend.default", "jax")
        port.set("backend.jax.mesh", {"fsdp": hw.devices // tp, "tp": tp})
    elif hw.chip.platform == "gpu":
        port.set("backend.default", "torch")
        port.set("backend.torch.devices", hw.devices)


def fit_batch(port: Port) -> None:
    """On a TPU mesh a per-device batch counts rows per fsdp shard: fewer rows per device where the tool's would not
    divide the global batch over the shards (the jax backend accumulates the rest)."""
    fsdp = port.get("backend.jax.mesh", {}).get("fsdp", 1) if port.get("backend.default") == "jax" else 1
    per, batch = port.get("train.per_device_batch_size", 1), port.get("train.global_batch_size")
    if batch is None or fsdp == 1 or batch % (per * fsdp) == 0:
        return
    fitted = next((p for p in range(per, 0, -1) if batch % (p * fsdp) == 0), None)
    if fitted is not None:
        port.set("train.per_device_batch_size", fitted)
        port.notes.append(f"train.per_device_batch_size {fitted}: {per} rows per device don't divide the global "
                          f"batch {batch} over the mesh's {fsdp} fsdp shards")  # fmt: skip


# --- data ---------------------------------------------------------------------------------------------------------
def data_path(key: str, value: str, config_dir: Path) -> tuple[str, bool]:
    """(the path a recipe source writes, whether it is a hub id): a local file, glob or folder (absolute, read
    against the config's folder as the tool run from there would), else a hub dataset id."""
    p = Path(value).expanduser()
    local = p if p.is_absolute() else config_dir / p
    if local.exists() or glob.has_magic(value) or not foreign_hub_id(key, value):
        return str(local.resolve()) if local.exists() else str(local), False
    return value, True


def peek_columns(path: str, is_hub: bool, revision: str | None = None) -> set[str] | None:
    """The column names of a source's first data file (a hub dataset's when cached), to tell TRL's dataset
    formats apart; None when nothing is at hand to read."""
    if is_hub:
        try:
            folder = hub.resolve(path, "dataset", revision, fetch=False).path
        except hub.HubError:
            return None
    else:
        folder = Path(path)
    files = [folder] if folder.is_file() else sorted(folder.rglob("*")) if folder.is_dir() else []
    for f in files:
        if f.suffix in (".jsonl", ".json") and f.is_file():
            for _, row in jsonl_rows(f):
                if row is not None:
                    return set(row) if isinstance(row, dict) else None
        if f.suffix == ".parquet" and f.is_file():
            import pyarrow.parquet as pq

            return set(pq.read_schema(f).names)
    return None
