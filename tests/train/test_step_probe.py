"""The step-probe contract (crosstune.train.backend.StepProbe), run against both backends: one optimizer step on
given rows with a given LoRA, through each backend's own training code. crosstune.parity.check relies on exactly
this, so a backend change that breaks it fails here with the contract's own words, not only as a parity gap."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.paths import RECIPES

RECIPE = RECIPES / "tiny-cpu.yaml"


@pytest.fixture(scope="module")
def setup(tmp_path_factory, synth_corpus_dir, tiny_gemma4_dir):
    from crosstune.data import prepare_dataset
    from crosstune.families import model_dir_spec
    from crosstune.parity.check import parity_lora
    from crosstune.recipe import load_recipe

    out = tmp_path_factory.mktemp("probe")
    recipe = load_recipe(
        RECIPE,
        [
            f"model.path={tiny_gemma4_dir}",
            f"data.sources=[{{path: {synth_corpus_dir / 'train.jsonl'}}}]",
            "data.truncation=truncate",
            f"output_dir={out}",
            f"eval.problems={synth_corpus_dir / 'eval'}",
            "lora.dropout=0.0",
            "model.dtype=float32",
            "train.precision=fp32",
            "train.grad_accumulation=2",
        ],
    )
    spec = model_dir_spec(tiny_gemma4_dir, "gemma4")
    lora = parity_lora(spec, recipe.lora.rank, recipe.lora.alpha, list(recipe.lora.targets), seed=0)
    return recipe, prepare_dataset(recipe), lora, spec.vocab_size


# jax (~28 CPU s: two compiled micro-batch steps) is slow: the default suite's parity test (tests/parity, gemma4) runs
# both backends' probes through crosstune.parity.check
@pytest.mark.parametrize("backend", ["torch", pytest.param("jax", marks=pytest.mark.slow)])
def test_step_probe_contract(backend, setup):
    from crosstune.train.session import step_probe

    recipe, prepared, lora, vocab = setup
    probe = step_probe(recipe, backend, prepared, lora, rows=2)
    assert probe.tokens > 0 and probe.recomputes == recipe.train.gradient_checkpointing
    loss, grads = probe.loss_and_grads()
    assert np.isfinite(loss) and 0 < loss < 2 * np.log(vocab)  # a cross-entropy in nats (uniform: ln V)
    assert sorted(grads) == sorted(lora.modules)  # every adapted module, in the PEFT layout
    for name, (ga, gb) in grads.items():
        a, b = lora.modules[name]
        assert (ga.shape, gb.shape) == (a.shape, b.shape), name
        assert np.isfinite(ga).all() and np.isfinite(gb).all() and np.abs(ga).max() > 0 and np.abs(gb).max() > 0
    no_freeze = {m: (np.zeros_like(a), np.zeros_like(b)) for m, (a, b) in lora.modules.items()}
    after, weights = probe.step(no_freeze)
    assert loss - after > 0.01  # the AdamW step at the peak learning rate lowers the step's own loss
    assert sorted(weights) == sorted(lora.modules)
    assert all(not np.array_equal(weights[m][0], lora.modules[m][0]) for m in lora.modules)  # every A moved
