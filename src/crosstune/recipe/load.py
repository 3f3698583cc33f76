"""Load a recipe YAML and report every problem with its YAML path, line and a hint."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from crosstune import hub
from crosstune.bounds import RECIPE
from crosstune.recipe.auto_target import resolve_auto
from crosstune.recipe.checks import check_recipe
from crosstune.recipe.findings import Problem, RecipeError
from crosstune.recipe.hub_ids import hub_model_id
from crosstune.recipe.paths import recipe_path
from crosstune.recipe.schema import Recipe
from crosstune.untrusted_files import UnreadableFile, parse_yaml, parse_yaml_node, read_text


def line_map(root: yaml.Node | None) -> dict[tuple, int]:
    """YAML path (tuple of keys/indices) -> 1-based line, from the composed node tree (checked within bounds by
    crosstune.untrusted_files: its aliases expand to a bounded number of nodes)."""
    lines: dict[tuple, int] = {}

    def walk(node: yaml.Node, path: tuple) -> None:
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                lines[path + (key.value,)] = key.start_mark.line + 1
                walk(value, path + (key.value,))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (i,))

    if root is not None:
        walk(root, ())
    return lines


def dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _line_for(lines: dict[tuple, int], loc: tuple) -> int | None:
    for n in range(len(loc), -1, -1):  # nearest enclosing node that exists in the file
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def _model_for(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model that owns the mapping at `loc` (to suggest the right key names)."""
    model: Any = Recipe
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        ann = field.annotation
        for cand in (ann, *getattr(ann, "__args__", ())):
            inner = getattr(cand, "__args__", (cand,))[0] if getattr(cand, "__origin__", None) is list else cand
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                model = inner
                break
        else:
            return None
    return model


def _hint_for(err: dict) -> str:
    loc, kind = tuple(err["loc"]), err["type"]
    if kind == "extra_forbidden":
        owner = _model_for(loc[:-1])
        known = list(owner.model_fields) if owner else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        return f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
    if kind == "literal_error":
        return f"allowed: {err['ctx']['expected']}"
    if kind == "missing":
        return "this key is required"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bound = RECIPE.get(".".join(str(p) for p in loc if not isinstance(p, int)))
        return bound.span() if bound else "must be a positive number" if err["ctx"].get("gt") == 0 else ""
    if kind in ("int_type", "float_type", "bool_type", "string_type") and isinstance(err.get("input"), str | bool):
        return _TYPE_HINTS[kind]
    if kind == "finite_number":
        return "NaN and infinity mean nothing here: give a number"
    return ""


_TYPE_HINTS = {
    "int_type": 'a whole number, unquoted (e.g. 8, not "8" or 8.0)',
    "float_type": "a number, unquoted (e.g. 1.0e-4 or 0.5)",
    "bool_type": "true or false (YAML 1.2: yes/no/on/off are strings)",
    "string_type": 'quote it to make it text, e.g. "no"',
}
# One setting given by two keys: a --set of one replaces the file's other (the command line states the intent).
_SAME_SETTING = {
    ("train", "max_steps"): "epochs",
    ("train", "epochs"): "max_steps",
    ("train", "global_batch_size"): "grad_accumulation",
    ("train", "grad_accumulation"): "global_batch_size",
    ("train", "warmup_steps"): "warmup_ratio",
    ("train", "warmup_ratio"): "warmup_steps",
}


def _apply_override(data: dict, assignment: str) -> None:
    """`a.b.c=value` (value parsed as YAML) into nested dicts."""
    if "=" not in assignment:
        raise RecipeError(None, [Problem(assignment, "override must look like key.path=value")])
    key, raw = assignment.split("=", 1)
    node = data
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise RecipeError(None, [Problem(key, f"cannot set {key}: {part} is not a mapping")])
    try:
        node[parts[-1]] = parse_yaml(raw, f"--set {key}")
        node.pop(_SAME_SETTING.get(tuple(parts), ""), None)
    except UnreadableFile as e:
        hint = "quote the value for the shell and close every bracket, e.g. --set 'lora.targets=[q, v]'"
        shown = assignment if len(assignment) <= 200 else f"{key}=<{len(raw):,} characters>"
        raise RecipeError(None, [Problem(key, f"--set {shown!r}: {e.reason}", hint)]) from None


def parse_recipe(
    text: str, file: str | Path | None = None, overrides: list[str] | None = None, *, base_dir: Path | None = None
) -> Recipe:
    """Validate YAML text; raises RecipeError listing every schema and consistency problem."""
    try:
        data, root = parse_yaml_node(text, file or "<recipe>")
    except UnreadableFile as e:
        raise RecipeError(file, [Problem("", e.reason, line=e.line)]) from None
    lines = line_map(root)
    if not isinstance(data, dict):
        raise RecipeError(file, [Problem("", "a recipe is a YAML mapping (name:, model:, data:, ...)", line=1)])
    for assignment in overrides or []:
        _apply_override(data, assignment)
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = tuple(p for p in err["loc"] if p not in ("function-after",))
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"unknown key {loc[-1]!r}"
            elif err["type"] in _TYPE_HINTS and isinstance(err.get("input"), str | bool | int | float):
                msg = f"{msg}, not {err['input']!r}"
            problems.append(Problem(dotted(loc), msg, _hint_for(err), _line_for(lines, loc)))
        raise RecipeError(file, sorted(problems, key=lambda p: p.line or 0)) from None

    if base_dir is None and file:
        base_dir = Path(file).absolute().parent  # not resolve(): recipes/ is a link
    recipe, resolved = resolve_auto(recipe, base_dir)
    problems = sorted(
        (
            Problem(p.path, p.message, p.hint, _line_for(lines, _path_tuple(p.path)), p.severity)
            for p in resolved + check_recipe(recipe, base_dir)
        ),
        key=lambda p: p.line or 0,
    )
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise RecipeError(file, problems)
    if base_dir is None:  # a recipe text without a file: relative paths stay unresolvable (resolve_path says so)
        recipe._warnings = problems
        return recipe
    return recipe.located(base_dir, problems)


def _path_tuple(path: str) -> tuple:
    out: list[Any] = []
    for part in path.replace("[", ".[").split("."):
        if part.startswith("["):
            out.append(int(part[1:-1]))
        elif part:
            out.append(part)
    return tuple(out)


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Read and validate a recipe file. Relative paths inside it resolve against the file's directory."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(path, [Problem("", f"recipe file not found: {path}")])
    try:
        text = read_text(path)
    except UnreadableFile as e:
        hint = "save the file as UTF-8" if e.kind == "invalid_utf8" else ""
        raise RecipeError(path, [Problem("", e.reason, hint, e.line)]) from None
    return parse_recipe(text, path, overrides)


def resolve_path(recipe: Recipe, value: str | None) -> Path | None:
    """A path from the recipe, relative to the recipe file's directory (crosstune.recipe.paths: the one rule)."""
    return None if value is None else recipe_path(value, recipe.base_dir, recipe.name)


def model_snapshot(recipe: Recipe, *, fetch: bool = True) -> hub.Snapshot | None:
    """The hub snapshot `model.path` names (None: a local folder, or no model.path). `fetch`: download the files a
    run reads when online (crosstune.hub); False reads the cache only. A HubError says what to run when it can't."""
    repo = hub_model_id(recipe.model.path)
    return None if repo is None else hub.resolve(repo, "model", recipe.model.revision, fetch=fetch)


def model_path(recipe: Recipe, *, fetch: bool = True) -> Path | None:
    """`model.path` as a folder: local (relative to the recipe file), or a hub id's snapshot in the hub cache."""
    snap = model_snapshot(recipe, fetch=fetch)
    return snap.path if snap is not None else resolve_path(recipe, recipe.model.path)


def recipe_hash(recipe: Recipe) -> str:
    """Stable hash of the resolved recipe (detects stale prepared data and runs)."""
    import hashlib

    payload = json.dumps(recipe.model_dump(mode="json"), sort_keys=True).encode()
    return hashlib.sha256(payload).hexdigest()[:16]
