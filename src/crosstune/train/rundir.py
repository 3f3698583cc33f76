"""The run directory: the contract between training, export, report and cost (never backend internals).

<run>/recipe.yaml     the resolved recipe            <run>/run.json         metadata (below)
<run>/metrics.jsonl   per-step metrics (metrics.py)  <run>/tensorboard/     the same, for TensorBoard
<run>/checkpoints/    backend checkpoints by step    <run>/adapter/         PEFT adapter (final)
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from crosstune.errors import read_json
from crosstune.recipe import Recipe, recipe_hash

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
    from crosstune.recipe import resolve_path

    return resolve_path(recipe, recipe.output_dir) / f"{recipe.name}-{backend}"


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    return out


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file + rename so a crash never leaves a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_run_metadata(run_dir: Path, recipe: Recipe, backend: str, **extra: Any) -> dict[str, Any]:
    """recipe.yaml + run.json with everything export needs (family, LoRA rank/alpha/targets, base path)."""
    from crosstune.recipe import resolve_path

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
    atomic_write_text(run_dir / "recipe.yaml", yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False))
    atomic_write_text(run_dir / "run.json", json.dumps(meta, indent=2))
    return meta


def read_run_metadata(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a crosstune run directory: no run.json")
    return read_json(path, "run.json is written by `crosstune train`: restore it from a backup or train the run again")
