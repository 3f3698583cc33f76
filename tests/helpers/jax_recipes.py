"""Shared helpers for the JAX backend tests: a tiny-model recipe pointing at the session's fixtures."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.paths import REPO


def tiny_recipe(model_dir: Path, corpus_dir: Path, out: Path, family: str, *overrides: str):
    """recipes/tiny-cpu.yaml on a tiny test model, short sequences, data prepared once per family under `out`."""
    from crosstune.recipe import load_recipe

    return load_recipe(
        REPO / "recipes" / "tiny-cpu.yaml",
        [
            f"model.family={family}",
            f"model.path={model_dir}",
            f"data.sources=[{{path: {corpus_dir / 'train.jsonl'}}}]",
            f"data.prepared_dir={out / ('data-' + family)}",
            "data.max_seq_len=512",
            "data.truncation=truncate",  # keep every synthetic record (a few exceed 512 tokens)
            f"output_dir={out / 'runs'}",
            f"eval.problems={corpus_dir / 'eval'}",
            *overrides,
        ],
    )


def train_both(recipe, out: Path, tag: str) -> dict:
    """Train `recipe` on both backends into out/<tag>-<backend>; returns {backend: TrainResult}."""
    from crosstune.data import prepare_dataset
    from crosstune.train.session import train

    prepare_dataset(recipe)
    return {name: train(recipe, out / f"{tag}-{name}", backend=name, progress=False) for name in ("torch", "jax")}
