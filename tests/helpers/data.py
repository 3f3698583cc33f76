"""Shared helpers for the data tests: write a recipe around a tiny model and some sources."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from crosstune.recipe import load_recipe


def write_recipe(folder: Path, model_dir: Path, family: str, sources: list[dict], **data) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    recipe = {
        "name": "t",
        "output_dir": str(folder / "runs"),
        "model": {"family": family, "path": str(model_dir), "dtype": "float32"},
        "data": {"sources": sources, **data},
        "hardware": "cpu",
        "train": {"precision": "fp32"},
    }
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def recipe_for(folder: Path, model_dir: Path, family: str, sources: list[dict], overrides=None, **data):
    return load_recipe(write_recipe(folder, model_dir, family, sources, **data), overrides)


def write_jsonl(path: Path, rows: list) -> Path:
    """Rows are dicts (written as JSON) or bytes/str (written verbatim, one per line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        for row in rows:
            raw = row if isinstance(row, bytes) else (row if isinstance(row, str) else json.dumps(row)).encode("utf-8")
            f.write(raw + b"\n")
    return path
