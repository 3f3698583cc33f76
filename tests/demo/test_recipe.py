"""The demo's recipe trains what its system prompt asks for (no prompt/target warning), and the base's pretraining
text keeps the settings the shipped base was built with whatever the LoRA recipe's data section says."""

from __future__ import annotations

import pytest

from crosstune.demo.split import HELD_OUT_KINDS
from crosstune.pretrain.base_model import PretrainConfig, base_recipe, pretrained_base
from crosstune.recipe import load_recipe
from crosstune.recipes import shipped_recipe


@pytest.fixture(scope="module")
def demo_corpus(tmp_path_factory):
    from crosstune.synth import generate_corpus

    out = tmp_path_factory.mktemp("demo_corpus")
    generate_corpus(out, n_train=24, n_eval=0, seed=0, task_kinds=HELD_OUT_KINDS)
    return out


def _prepare(corpus, out, *overrides: str) -> tuple[list, dict]:
    """(recipe warnings, prepared stats) of the shipped demo recipe on `corpus`, as the demo points it."""
    from crosstune.data import prepare_dataset

    recipe = load_recipe(
        shipped_recipe("demo-cpu.yaml"),
        [
            f"model.path={pretrained_base()}",
            f"data.sources=[{{path: {corpus / 'train.jsonl'}}}]",
            f"output_dir={out}",
            *overrides,
        ],
    )
    return recipe.warnings, prepare_dataset(recipe, force=True).stats


def test_the_demo_recipe_prepares_its_data_without_a_prompt_target_warning(demo_corpus, tmp_path):
    warnings, stats = _prepare(demo_corpus, tmp_path / "tags")
    assert stats["warnings"] == []
    assert [w.path for w in warnings if w.path.startswith("data.")] == []
    # The records' CodeV-R1 system prompt asks for <think>/<answer>: plain targets are what the warning is about.
    _, plain = _prepare(demo_corpus, tmp_path / "plain", "data.answer_markup=plain")
    assert len(plain["warnings"]) == 1 and "in 24 of 24 records" in plain["warnings"][0]
    assert "asks for <think>…</think> and <answer>…</answer> tags" in plain["warnings"][0]


def test_the_base_text_keeps_the_settings_the_shipped_base_was_built_with(tmp_path):
    """The cache key hashes the corpus, not the recipe file the pretraining borrows: its data settings are pinned
    (demo.pretrain.BASE_TEXT) so the demo's answer_markup: tags leaves the shipped base valid."""
    data = base_recipe(PretrainConfig(), tmp_path / "init", tmp_path / "corpus", tmp_path).data
    assert load_recipe(shipped_recipe("demo-cpu.yaml")).data.answer_markup == "tags"
    assert (data.columns.preset, data.system_prompt.policy, data.reasoning, data.answer_markup) == (
        "codev_r1",
        "keep",
        "strip",
        "plain",
    )
    assert (data.truncation, data.packing, data.max_seq_len, data.subsample) == ("drop", False, 1024, None)
