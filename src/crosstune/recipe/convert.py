"""`recipe import` and `recipe export` as library calls: a user's Axolotl, TRL or LLaMA-Factory config (read by the
one YAML loader, crosstune.untrusted_files, then through its format's key table: crosstune.recipe.porting) to a
recipe that validates, and a recipe to a config for the user's own tool. Every file is a serialised value
(crosstune.emit): the YAML opens with a head comment naming what made it and listing what did not carry over, and
ends with the sha256 of what it wrote (crosstune.ownership's one-file rule, FileKind): an existing file is replaced
only when it is the command's own, unchanged. LLaMA-Factory's dataset_info.json goes in a folder beside the config,
owned by its manifest (crosstune.ownership's folder rule)."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstune.emit import json_text, yaml_text
from crosstune.errors import InputError
from crosstune.fsutil import atomic_write_text
from crosstune.ownership import (
    FileKind,
    OutputKind,
    OutputRefused,
    check_out,
    owned_output,
    refusal,
    write_manifest,
    write_owned_file,
)
from crosstune.recipe.findings import RecipeError
from crosstune.recipe.load import line_map, load_recipe, parse_recipe
from crosstune.recipe.porting import axolotl_keys, llamafactory_keys, trl_keys
from crosstune.recipe.porting.from_axolotl import import_axolotl
from crosstune.recipe.porting.from_llamafactory import import_llamafactory
from crosstune.recipe.porting.from_trl import import_trl
from crosstune.recipe.porting.port import ImportRefused, Keys, Port, Unmapped
from crosstune.recipe.porting.target import ImportOptions
from crosstune.recipe.porting.to_axolotl import export_axolotl
from crosstune.recipe.porting.to_llamafactory import export_llamafactory
from crosstune.recipe.porting.to_trl import export_trl
from crosstune.recipe.porting.typed import Source
from crosstune.recipe.schema import SAFE_NAME, Recipe
from crosstune.untrusted_files import parse_yaml_node, read_text


@dataclass(frozen=True)
class Format:
    """A tool's config format: its one key table, its importer and exporter, and the command that runs a file."""

    keys: dict
    importer: Callable[[Keys, Path, ImportOptions], Port]
    exporter: Callable[[Recipe, Path | None], tuple[dict[str, Any], list[Unmapped], dict[Path, str]]]
    command: str


def _llamafactory(recipe: Recipe, out: Path | None) -> tuple[dict[str, Any], list[Unmapped], dict[Path, str]]:
    """LLaMA-Factory names its data only in a dataset_info.json: written in a folder beside the config."""
    if out is None:
        raise InputError(
            "--to llamafactory writes two files, the config and the dataset_info.json its dataset names "
            "resolve through: give --out FILE"
        )
    folder = out.absolute().parent / f"{out.stem}-data"
    config, missing, info = export_llamafactory(recipe, folder)
    return config, missing, {folder / llamafactory_keys.DATASET_INFO: json_text(info)}


FORMATS = {
    "axolotl": Format(axolotl_keys.KEYS, import_axolotl, lambda r, out: (*export_axolotl(r), {}), "axolotl train FILE"),
    "trl": Format(trl_keys.KEYS, import_trl, lambda r, out: (*export_trl(r), {}), "trl sft --config FILE"),
    "llamafactory": Format(llamafactory_keys.KEYS, import_llamafactory, _llamafactory, "llamafactory-cli train FILE"),
}
IMPORT_HEAD = "# crosstune recipe import"
EXPORT_HEAD = "# crosstune recipe export"
MAX_CONFIG_BYTES = 1 << 20  # a training config is a few KB: anything past 1 MiB is not one
DROPPED = "not mapped: "  # how an imported recipe's head lists what the import did not carry
# The folder an export writes beside its config (LLaMA-Factory's dataset_dir, `--out`'s stem + "-data"): its manifest
COMPANIONS = OutputKind("crosstune recipe export", "crosstune_export.json")
COMPANION_LABEL = "dataset folder"


@dataclass
class Imported:
    recipe: Recipe
    text: str  # the recipe file as written
    port: Port


def read_config(path: Path) -> tuple[dict[str, Any], Source]:
    """A user's YAML config through crosstune's one YAML loader, with the line of each key; a wrong file is one
    InputError naming it."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such config file")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise InputError(f"{path}: {path.stat().st_size:,} bytes is not a training config (at most 1 MiB)")
    data, root = parse_yaml_node(read_text(path), path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: a config is a YAML mapping of keys (base_model: ..., model_name_or_path: ...)")
    return data, Source(path, line_map(root))


def detect_format(cfg: dict[str, Any], path: Path) -> str:
    """Axolotl names its model base_model; LLaMA-Factory and TRL model_name_or_path, LLaMA-Factory with keys of its
    own beside it (its fine-tuning type, stage, template, cutoff length, LoRA rank or targets)."""
    if "base_model" in cfg:
        return "axolotl"
    if "model_name_or_path" in cfg:
        return "llamafactory" if any(k in cfg for k in llamafactory_keys.OWN) else "trl"
    raise ImportRefused(
        f"{path}: neither Axolotl's base_model nor model_name_or_path (TRL, LLaMA-Factory): give "
        f"--from {'|'.join(FORMATS)}"
    )


def import_config(
    path: Path,
    out: Path,
    *,
    fmt: str | None = None,
    hardware: str | None = None,
    source_devices: int | None = None,
    global_batch: int | None = None,
    name: str | None = None,
) -> Imported:
    """The recipe the config at `path` describes, validated as `out` would be (nothing is written here): for the
    `hardware` target, the source's global batch over `source_devices` (where the config doesn't say) or
    `global_batch` itself."""
    path, out = Path(path).absolute(), Path(out).absolute()
    cfg, source = read_config(path)
    fmt = fmt or detect_format(cfg, path)
    form = FORMATS[fmt]
    options = ImportOptions(hardware, source_devices, global_batch)
    port = form.importer(Keys(cfg, form.keys, source), path, options)
    name = name or re.sub(r"[^A-Za-z0-9._-]", "-", out.stem).lstrip("._-") or "imported"
    if not SAFE_NAME.fullmatch(name):
        raise ImportRefused(f"--name {name!r}: letters, digits, '.', '_' and '-', starting with a letter or digit")
    recipe = _in_schema_order(
        {"name": name, "description": f"Imported from {path.name} ({fmt})", **port.recipe}, Recipe
    )
    head = _head(f"{IMPORT_HEAD}: {path} ({fmt})", port.unmapped, port.notes)
    text = yaml_text(recipe, head=head, allow_unicode=True)
    try:
        checked = parse_recipe(text, out, base_dir=out.parent)
    except RecipeError as e:  # a mapping crosstune's own checks refuse: say so in the config's terms
        raise ImportRefused(f"{path}: the recipe it maps to is not valid: {e}") from None
    return Imported(checked, text, port)


def _in_schema_order(data: Any, model: Any) -> Any:
    """`data` with each mapping's keys in the order its schema section declares them (as `recipe show` prints)."""
    if not isinstance(data, dict) or model is None:
        return data
    fields = getattr(model, "model_fields", {})
    ordered = sorted(data, key=lambda k: list(fields).index(k) if k in fields else len(fields))
    return {k: _in_schema_order(data[k], _section_model(fields.get(k))) for k in ordered}


def _section_model(info: Any) -> Any:
    for cand in (getattr(info, "annotation", None), *getattr(getattr(info, "annotation", None), "__args__", ())):
        if isinstance(cand, type) and hasattr(cand, "model_fields"):
            return cand
    return None


def export_recipe(
    recipe_file: Path, to: str, overrides: list[str] | None = None, out: Path | None = None
) -> tuple[str, list[Unmapped], dict[Path, str]]:
    """The recipe's torch leg as a `to` config (YAML text with its head comment, to be written at `out`), what it
    can't carry, and the files the config names beside it (LLaMA-Factory's dataset_info.json); a recipe `recipe
    import` wrote also restates what that import did not carry (the run differs from its source there)."""
    recipe = load_recipe(recipe_file, overrides)
    form = FORMATS[to]
    config, missing, files = form.exporter(recipe, out)
    source, dropped = import_drops(Path(recipe_file))
    missing = missing + [Unmapped(f"the import of {source}", line) for line in dropped]
    head = f"{EXPORT_HEAD}: the torch leg of {Path(recipe_file).absolute()} (recipe {recipe.name}) for `{form.command}`"
    return yaml_text(config, head=_head(head, missing, []), allow_unicode=True), missing, files


def import_drops(recipe_file: Path) -> tuple[str, list[str]]:
    """(the config a recipe was imported from, what that import did not carry): the head comment `recipe import`
    wrote, read back; nothing for a recipe it did not write."""
    lines = read_text(recipe_file).splitlines()
    if not lines or not lines[0].startswith(f"{IMPORT_HEAD}: "):
        return "", []
    source = lines[0].removeprefix(f"{IMPORT_HEAD}: ").rsplit(", ", 1)[0]
    head = list(itertools.takewhile(lambda line: line.startswith("# "), lines[1:]))
    head = [line.removeprefix("# ") for line in head]
    return source, [line.removeprefix(DROPPED) for line in head if line.startswith(DROPPED)]


def _head(first: str, unmapped: list[Unmapped], notes: list[str]) -> list[str]:
    """The head comment's lines (crosstune.emit writes each as one comment line, whatever the config's keys hold)."""
    notes = [f"note: {n}" for n in notes]
    return [f"{first.removeprefix('# ')}, {time.strftime('%Y-%m-%d')}", *(u.render() for u in unmapped), *notes]


def write_output(out: Path, text: str, head: str, inputs: tuple[Path, ...] = ()) -> Path:
    """Write `text` to `out`, replacing only a file the command `head` names wrote, unchanged (its last line holds the
    sha256 of the rest: crosstune.ownership.FileKind); never `inputs`."""
    check_out(out, file=True, inputs=inputs, what="input")
    return write_owned_file(out, text, FileKind(head.removeprefix("# ")))


def companion_refusal(files: dict[Path, str], inputs: tuple[Path, ...] = ()) -> None:
    """OutputRefused, before anything is written, when write_companions could not write `files`."""
    for folder in {path.parent for path in files}:
        folder = check_out(folder, inputs=inputs, what="input", label=COMPANION_LABEL)
        if folder.is_dir() and any(folder.iterdir()) and (why := refusal(folder, COMPANIONS, COMPANION_LABEL)):
            raise OutputRefused(f"{why} (the folder is named after --out)")


def write_companions(files: dict[Path, str], inputs: tuple[Path, ...] = ()) -> list[Path]:
    """Write the files an exported config names beside it (LLaMA-Factory's dataset_info.json, text from
    crosstune.emit): their folder is the export's own output, swapped into place whole with its manifest listing
    each file's sha256 (crosstune.ownership.owned_output); an existing folder is replaced only when it holds this
    command's files, unchanged."""
    written = []
    folders: dict[Path, dict[str, str]] = {}
    for path, text in files.items():
        folders.setdefault(path.parent, {})[path.name] = text
    for folder, named in folders.items():
        with owned_output(folder, COMPANIONS, inputs=inputs, what="input", label=COMPANION_LABEL) as tmp:
            for name, text in named.items():
                atomic_write_text(tmp / name, text)
            write_manifest(tmp, COMPANIONS)
        written += [folder.absolute() / name for name in named]
    return written
