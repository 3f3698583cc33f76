"""Shared helpers for the data tests: write a recipe around a tiny model and some sources; the tiny recipe as CLI
arguments."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from crosstune.recipe import load_recipe
from tests.helpers.paths import RECIPES


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


TINY = RECIPES / "tiny-cpu.yaml"


def tiny_args(model_dir: Path, corpus_dir: Path, out: Path, *extra: str) -> list[str]:
    """recipes/tiny-cpu.yaml on the session's tiny model and corpus, everything written under `out`, as CLI
    arguments (RECIPE --set ... --set ...)."""
    sets = [
        f"model.path={model_dir}",
        f"data.sources=[{{path: {corpus_dir / 'train.jsonl'}}}]",
        f"data.prepared_dir={out / 'data'}",
        "data.max_seq_len=512",
        "data.truncation=truncate",
        f"output_dir={out / 'runs'}",
        *extra,
    ]
    return [str(TINY), *(a for s in sets for a in ("--set", s))]
