"""Fixtures of the torch backend's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from crosstune.recipe import load_recipe

RECIPE = """\
name: kernels-{family}
output_dir: {root}/runs
model: {{family: {family}, path: {model}, dtype: float32}}
lora: {{rank: 4, alpha: 8, dropout: 0.0, targets: [q, k, v, o, gate, up, down]}}
data:
  sources: [{{path: {corpus}/train.jsonl}}]
  max_seq_len: 512
  packing: true
  strict: false
  subsample: {{size: 6, seed: 42}}
  prepared_dir: {root}/prepared
train:
  max_steps: 2
  learning_rate: 1.0e-3
  schedule: constant
  gradient_checkpointing: false
  precision: fp32
  log_every: 1
  checkpoint_every: 100
hardware: cpu
"""


@pytest.fixture(scope="module")
def recipe_path(tmp_path_factory, tiny_gemma4_dir, synth_corpus_dir) -> Path:
    """The tiny Gemma 4 training recipe (RECIPE), its data prepared; one per test module."""
    from crosstune.data import prepare_dataset

    root = tmp_path_factory.mktemp("kernels")
    path = root / "recipe.yaml"
    path.write_text(RECIPE.format(family="gemma4", root=root, model=tiny_gemma4_dir, corpus=synth_corpus_dir))
    prepare_dataset(load_recipe(path))
    return path
