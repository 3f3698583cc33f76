"""The run directory's layout: the name of every file in it, and the one reader of run.json, recipe.yaml and the
checkpoint folders (metrics.jsonl's reader is crosstune.run.metrics). Training, export, cost and report all come
through here, never through a backend's internals.

<run>/recipe.yaml     the resolved recipe            <run>/run.json         metadata (crosstune.run.rundir)
<run>/metrics.jsonl   per-step metrics (metrics.py)  <run>/tensorboard/     the same, for TensorBoard
<run>/checkpoints/    backend checkpoints by step    <run>/adapter/         PEFT adapter (final)
<run>/loss.png        the loss curve (plot.py)       <run>/.lock            held by the process training into it
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from crosstune.errors import InputError, read_json
from crosstune.recipe.schema import RESOLVED, Recipe

RUN_JSON = "run.json"
RECIPE_YAML = "recipe.yaml"
METRICS_JSONL = "metrics.jsonl"
TENSORBOARD = "tensorboard"
CHECKPOINTS = "checkpoints"
ADAPTER = "adapter"
LOSS_PNG = "loss.png"
LOCK = ".lock"  # flock'ed by the process that trains into the run (crosstune.fsutil.exclusive_lock)
TORCH_CHECKPOINT_PREFIX = "checkpoint-"  # torch: checkpoints/checkpoint-N; Orbax (jax): checkpoints/N


class RunDirError(InputError):
    """A folder given as a run directory isn't one, or lacks what was asked of it."""


_RESTORE = "restore it from a backup or train the run again"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


_FIELD_KINDS = {
    "seconds": (lambda v: _number(v) and v >= 0, "a finite number of seconds >= 0"),
    "count": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a whole number >= 0"),
    "positive": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0, "a whole number > 0"),
    "scale": (lambda v: _number(v) and v > 0, "a finite number > 0"),
    "fraction": (lambda v: _number(v) and 0 <= v < 1, "a number in [0, 1)"),
    "text": (lambda v: isinstance(v, str), "text"),
    "flag": (lambda v: isinstance(v, bool), "true or false"),
}
# run.json fields that readers (export, resume, cost, report) compute with, and what each must be when present.
RUN_JSON_FIELDS = {
    "format": "positive",
    "backend": "text",
    "recipe_name": "text",
    "recipe_hash": "text",
    "family": "text",
    "base_model": "text",
    "hardware": "text",
    "precision": "text",
    "loss_convention": "text",
    "steps": "count",
    "resumed_from_step": "count",
    "compile_time_s": "seconds",
    "checkpoint_time_s": "seconds",
    "world_size": "positive",
    "devices": "positive",
    "global_batch": "positive",
    "grad_accumulation": "positive",
    "gradient_checkpointing": "flag",
    "lora.rank": "positive",
    "lora.alpha": "scale",
    "lora.dropout": "fraction",
    "mesh.fsdp": "positive",
    "mesh.tp": "positive",
}


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def is_run_dir(path: Path) -> bool:
    return (Path(path) / RUN_JSON).is_file()


def read_run_metadata(run_dir: Path) -> dict[str, Any]:
    """run.json, or an error naming the folder (missing), the file and position (corrupt), or the field whose value
    has the wrong type or range (RUN_JSON_FIELDS: the figures readers compute with)."""
    path = Path(run_dir) / RUN_JSON
    if not path.is_file():
        raise RunDirError(f"{run_dir}: no {RUN_JSON} — not a crosstune run directory")
    meta = read_json(path, "run.json is written by `crosstune train`: restore it from a backup or train the run again")
    if not isinstance(meta, dict):
        raise RunDirError(f"{path}: not a JSON object; restore it from a backup or train the run again")
    for key, kind in RUN_JSON_FIELDS.items():
        node, parts = meta, key.split(".")
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        value = node.get(parts[-1]) if isinstance(node, dict) else None
        if value is not None and not _FIELD_KINDS[kind][0](value):
            raise RunDirError(f"{path}: {key} is {value!r}, not {_FIELD_KINDS[kind][1]}; {_RESTORE}")
    return meta


def read_run_recipe(run_dir: Path) -> dict[str, Any]:
    """recipe.yaml as written by training (a plain dict; {} when the run has none), checked against the recipe
    schema: a value of the wrong type or out of range is an error naming the file and its YAML path."""
    path = Path(run_dir) / RECIPE_YAML
    if not path.is_file():
        return {}
    try:  # PyYAML's safe_dump wrote it: safe_load is its exact inverse (a quoted "1e5" stays text, and so on)
        recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise RunDirError(f"{path}: unreadable ({_one_line(e)}); {_RESTORE}") from None
    if recipe is None:
        return {}
    if not isinstance(recipe, dict):
        raise RunDirError(f"{path}: not a YAML mapping; {_RESTORE}")
    try:
        Recipe.model_validate(recipe, context={RESOLVED: True})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "<root>"
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise RunDirError(f"{path}: {where}: {first['msg']}{more}; {_RESTORE}") from None
    return recipe


def step_folders(run_dir: Path) -> dict[int, Path]:
    """Complete checkpoints of either backend by step: torch's checkpoint-N, Orbax's N (both renamed into place
    whole; staging folders and Orbax's temp folders don't match)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return {}
    found = {}
    for p in root.iterdir():
        name = p.name.removeprefix(TORCH_CHECKPOINT_PREFIX)
        if p.is_dir() and name.isdigit():
            found[int(name)] = p
    return dict(sorted(found.items()))


def saved_steps(run_dir: Path) -> list[int]:
    return list(step_folders(run_dir))
