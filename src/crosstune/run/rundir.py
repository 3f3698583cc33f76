"""Creating a run directory: claiming it for one training process, and writing its recipe.yaml and run.json
(names and readers: crosstune.run.layout)."""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import json
import platform
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from crosstune.fsutil import atomic_write_text, exclusive_lock, say
from crosstune.recipe import Recipe, recipe_hash, resolve_path
from crosstune.run.layout import LOCK, RECIPE_YAML, RUN_JSON
from crosstune.run.resume import check_resume

RUN_FORMAT = 1
VERSIONED = (
    "torch",
    "transformers",
    "peft",
    "trl",
    "accelerate",
    "jax",
    "flax",
    "optax",
    "orbax-checkpoint",
    "grain",
    "qwix",
    "google-tunix",
    "safetensors",
)


def default_run_dir(recipe: Recipe, backend: str) -> Path:
    return resolve_path(recipe, recipe.output_dir) / f"{recipe.name}-{backend}"


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    return out


@contextlib.contextmanager
def claim_run_dir(run_dir: Path, recipe: Recipe, backend: str, *, resume: bool, lead: bool = True) -> Iterator[Path]:
    """Both backends' entry to a run directory: the absolute path (resolved once, here: Orbax refuses relative
    ones), held exclusively for the run's life (<run>/.lock; a second `crosstune train` into it is refused naming
    this process), and on --resume the recipe checked against the one the run was trained with.
    `lead`: this process owns the run (torch launcher / jax process 0); other processes only get the path."""

    run_dir = Path(run_dir).expanduser().resolve()
    if not lead:
        yield run_dir
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    hint = "wait for that run to finish, or choose another --run-dir"
    with exclusive_lock(run_dir / LOCK, f"run directory {run_dir}", hint):
        if resume:
            for note in check_resume(run_dir, recipe, backend):
                say(note)
        yield run_dir


def write_run_metadata(run_dir: Path, recipe: Recipe, backend: str, **extra: Any) -> dict[str, Any]:
    """recipe.yaml + run.json with everything export needs (family, LoRA rank/alpha/targets, base path)."""

    meta = {
        "format": RUN_FORMAT,
        "backend": backend,
        "recipe_name": recipe.name,
        "recipe_hash": recipe_hash(recipe),
        "family": recipe.model.family,
        "base_model": str(resolve_path(recipe, recipe.model.path)) if recipe.model.path else None,
        "dtype": recipe.model.dtype,
        "lora": {
            "rank": recipe.lora.rank,
            "alpha": recipe.lora.alpha,
            "dropout": recipe.lora.dropout,
            "targets": list(recipe.lora.targets),
        },
        "hardware": recipe.hardware,
        "versions": versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **extra,
    }
    atomic_write_text(run_dir / RECIPE_YAML, yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False))
    update_run_metadata(run_dir, meta)
    return meta


def update_run_metadata(run_dir: Path, meta: dict[str, Any]) -> None:
    """Replace run.json with `meta` (atomically: a reader sees the old file or the new one)."""
    atomic_write_text(Path(run_dir) / RUN_JSON, json.dumps(meta, indent=2))
