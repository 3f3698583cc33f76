"""`recipe import` and `recipe export` as library calls: a user's Axolotl or TRL config (read by the one YAML loader,
crosstune.untrusted_files) to a recipe that validates, and a recipe to a config for the user's own tool. The
written file opens with a head comment naming what made it and listing what did not carry over, and ends with the
sha256 of what it wrote (crosstune.ownership's one-file rule): an existing file is replaced only when it is the
command's own, unchanged."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstune.emit import yaml_text
from crosstune.errors import InputError
from crosstune.ownership import FileKind, check_out, write_owned_file
from crosstune.recipe.findings import RecipeError
from crosstune.recipe.from_axolotl import import_axolotl
from crosstune.recipe.from_trl import import_trl
from crosstune.recipe.load import load_recipe, parse_recipe
from crosstune.recipe.porting import ImportRefused, Port, Unmapped
from crosstune.recipe.schema import SAFE_NAME, Recipe
from crosstune.recipe.to_axolotl import export_axolotl
from crosstune.recipe.trl_format import export_trl
from crosstune.untrusted_files import read_yaml

FORMATS = ("axolotl", "trl")
IMPORT_HEAD = "# crosstune recipe import"
EXPORT_HEAD = "# crosstune recipe export"
MAX_CONFIG_BYTES = 1 << 20  # a training config is a few KB: anything past 1 MiB is not one


@dataclass
class Imported:
    recipe: Recipe
    text: str  # the recipe file as written
    port: Port


def read_config(path: Path) -> dict[str, Any]:
    """A user's YAML config through crosstune's one YAML loader; a wrong file is one InputError naming it."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such config file")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise InputError(f"{path}: {path.stat().st_size:,} bytes is not a training config (at most 1 MiB)")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: a config is a YAML mapping of keys (base_model: ..., model_name_or_path: ...)")
    return data


def detect_format(cfg: dict[str, Any], path: Path) -> str:
    if "base_model" in cfg:
        return "axolotl"
    if "model_name_or_path" in cfg:
        return "trl"
    raise ImportRefused(f"{path}: neither Axolotl's base_model nor TRL's model_name_or_path: give --from axolotl|trl")


def import_config(path: Path, out: Path, *, fmt: str | None = None, hardware: str | None = None,
                  name: str | None = None) -> Imported:  # fmt: skip
    """The recipe the config at `path` describes, validated as `out` would be (nothing is written here)."""
    path, out = Path(path).absolute(), Path(out).absolute()
    cfg = read_config(path)
    fmt = fmt or detect_format(cfg, path)
    port = (import_axolotl if fmt == "axolotl" else import_trl)(cfg, path, hardware)
    name = name or re.sub(r"[^A-Za-z0-9._-]", "-", out.stem).lstrip("._-") or "imported"
    if not SAFE_NAME.fullmatch(name):
        raise ImportRefused(f"--name {name!r}: letters, digits, '.', '_' and '-', starting with a letter or digit")
    recipe = _in_schema_order({"name": name, "description": f"Imported from {path.name} ({fmt})", **port.recipe},
                              Recipe)  # fmt: skip
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


def export_recipe(recipe_file: Path, to: str, overrides: list[str] | None = None) -> tuple[str, list[Unmapped]]:
    """The recipe's torch leg as a `to` config (YAML text with its head comment) and what it can't carry."""
    recipe = load_recipe(recipe_file, overrides)
    config, missing = (export_trl if to == "trl" else export_axolotl)(recipe)
    use = "trl sft --config FILE" if to == "trl" else "axolotl train FILE"
    head = f"{EXPORT_HEAD}: the torch leg of {Path(recipe_file).absolute()} (recipe {recipe.name}) for `{use}`"
    return yaml_text(config, head=_head(head, missing, []), allow_unicode=True), missing


def _head(first: str, unmapped: list[Unmapped], notes: list[str]) -> list[str]:
    """The head comment's lines (crosstune.emit writes each as one comment line, whatever the config's keys hold)."""
    notes = [f"note: {n}" for n in notes]
    return [f"{first.removeprefix('# ')}, {time.strftime('%Y-%m-%d')}", *(u.render() for u in unmapped), *notes]


def write_output(out: Path, text: str, head: str, inputs: tuple[Path, ...] = ()) -> Path:
    """Write `text` to `out`, replacing only a file the command `head` names wrote, unchanged (its last line holds the
    sha256 of the rest: crosstune.ownership.FileKind); never `inputs`."""
    check_out(out, file=True, inputs=inputs, what="input")
    return write_owned_file(out, text, FileKind(head.removeprefix("# ")))
