"""`crosstune train` on both backends for the tiny member of each Gemma 4 architecture beyond the dense one: the E
models' (per-layer inputs, KV-shared layers, double-wide MLP), the 26B-A4B's (MoE beside the dense MLP, LoRA on
attention and the dense MLP) and the 12B's (transformers' gemma4_unified in the hub's multimodal layout: LoRA on the
text backbone only). The same recipe, prepared data and initial LoRA; the same loss step by step."""

from __future__ import annotations

import pytest

from tests.helpers.jax_recipes import tiny_recipe, train_both
from tests.helpers.loss_curves import assert_curves_agree
from tests.train.conftest import THREE_STEPS

pytest.importorskip("tunix")

FIXTURES = {"tiny-e": "tiny_gemma4_e_dir", "tiny-moe": "tiny_gemma4_moe_dir", "tiny-unified": "tiny_gemma4_unified_dir"}


# tiny-moe (~30 CPU s) is slow: tiny-e keeps a non-dense layout's training in the default suite, and the MoE's LoRA
# layout is checked in both stacks by tests/export/test_family_layouts.py
@pytest.mark.parametrize("size", ["tiny-e", "tiny-unified", pytest.param("tiny-moe", marks=pytest.mark.slow)])
def test_both_backends_train_the_same_losses(size, tmp_path, request, synth_corpus_dir):
    from crosstune.run.metrics import read_metrics
    from crosstune.run.records import read_run_record

    model_dir = request.getfixturevalue(FIXTURES[size])
    recipe = tiny_recipe(model_dir, synth_corpus_dir, tmp_path, "gemma4", *THREE_STEPS)
    runs = train_both(recipe, tmp_path, size)
    gaps = assert_curves_agree(runs, base_steps=2)  # steps 1-2: the base model; step 3 after one AdamW update
    print(f"{size} losses torch {runs['torch'].losses} jax {runs['jax'].losses}")
    print(f"{size} loss gaps per step: {[f'{g:.1e}' for g in gaps]}")
    rows = {b: read_metrics(runs[b].run_dir) for b in runs}
    assert [r.tokens for r in rows["torch"]] == [r.tokens for r in rows["jax"]]
    layouts = {b: read_run_record(runs[b].run_dir).lora.layout for b in runs}
    assert layouts["torch"] == layouts["jax"]
    if size == "tiny-e":  # the KV-shared layers 3-5 have no k/v projection to adapt
        assert layouts["jax"].skipped_layers == {"k": [3, 4, 5], "v": [3, 4, 5]}
        assert "KV-shared" in layouts["jax"].notes[0]
    else:  # k_eq_v global layer 5: no v (tiny-moe: the experts carry no LoRA)
        assert layouts["jax"].skipped_layers == {"v": [5]}
        assert layouts["jax"].modules == 6 * 7 - 1
