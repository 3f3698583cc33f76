"""Runs shared by tests/train: one tiny recipe trained by both backends, once per test run (tests/helpers/shared.py)."""

import pytest

from tests.helpers.jax_recipes import tiny_recipe, train_both
from tests.helpers.shared import built_once

# tiny Gemma 4, 3 steps (warmup 1: steps 1-2 are the base model, step 3 after one real AdamW update), one row per
# micro-batch, lr 5e-4 (test_lora_equivalence's TRAINED_TOL says why)
THREE_STEPS = ("train.max_steps=3", "train.warmup_steps=1", "train.per_device_batch_size=1", "train.learning_rate=5e-4")


@pytest.fixture(scope="session")
def three_step_runs(tmp_path_factory, tiny_gemma4_dir, synth_corpus_dir) -> dict:
    """{backend: TrainResult} of the THREE_STEPS recipe trained by torch and by jax."""
    pytest.importorskip("tunix")

    def build(out):
        return train_both(tiny_recipe(tiny_gemma4_dir, synth_corpus_dir, out, "gemma4", *THREE_STEPS), out, "g4")

    return built_once(tmp_path_factory, "three_steps", build)
