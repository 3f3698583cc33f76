"""The demo's honest split: held-out problems share no task kind with the pretrained base's corpus and no spec text
or parameters with any training record (the base's or the LoRA's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crosstune.demo.split import DEFAULT_EVAL, DEFAULT_TRAIN, HELD_OUT_KINDS, split_record
from crosstune.pretrain.base_model import BASE_KINDS, PretrainConfig
from crosstune.synth import TASK_KIND_BY_NAME, build_design, eval_prompt, generate_corpus, param_key
from crosstune.synth.corpus import select_task_kinds


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple[Path, Path]:
    """The demo's own corpora at their default sizes: the base's (pretraining) and the LoRA's with the eval set."""
    root = tmp_path_factory.mktemp("split")
    base = PretrainConfig()
    generate_corpus(root / "base", n_train=base.n_records, n_eval=0, seed=base.corpus_seed, task_kinds=base.task_kinds)
    generate_corpus(root / "lora", n_train=DEFAULT_TRAIN, n_eval=DEFAULT_EVAL, seed=0, task_kinds=HELD_OUT_KINDS)
    return root / "base", root / "lora"


def _records(corpus: Path) -> list[dict]:
    return [json.loads(line) for line in (corpus / "train.jsonl").read_text().splitlines()]


UNUSED_KINDS = ("sequence_detector",)  # the longest task kind (~700-token records): in neither corpus


def test_task_kinds_partition_the_registry():
    assert set(BASE_KINDS) | set(HELD_OUT_KINDS) | set(UNUSED_KINDS) == set(TASK_KIND_BY_NAME)
    assert not set(BASE_KINDS) & set(HELD_OUT_KINDS) and not set(UNUSED_KINDS) & set(BASE_KINDS)
    assert list(BASE_KINDS) == [f for f in TASK_KIND_BY_NAME if f in BASE_KINDS]  # registry order: the cache key


def test_no_eval_problem_task_kind_or_parameters_reach_any_training_record(corpora):
    base, lora = (json.loads((c / "manifest.json").read_text()) for c in corpora)
    assert set(base["families"]) == set(BASE_KINDS) and {r["family"] for r in base["train"]} == set(BASE_KINDS)
    assert len(lora["eval"]) == DEFAULT_EVAL >= 50
    assert {e["family"] for e in lora["eval"]} == set(HELD_OUT_KINDS)  # every held-out family is scored
    eval_keys = {param_key(e["family"], e["params"]) for e in lora["eval"]}
    train_keys = {param_key(r["family"], r["params"]) for m in (base, lora) for r in m["train"]}
    assert not eval_keys & train_keys
    assert not {e["family"] for e in lora["eval"]} & {r["family"] for r in base["train"]}


def test_no_eval_spec_text_appears_in_any_training_record(corpora):
    """Each eval prompt (its interface and behaviour, the problem's whole spec) is absent from every record."""
    texts = [r["prompt"] + "\n" + r["response"] for corpus in corpora for r in _records(corpus)]
    eval_dir = corpora[1] / "eval"
    specs = [p.read_text() for p in sorted(eval_dir.glob("*_prompt.txt"))]
    assert len(specs) == DEFAULT_EVAL
    for spec in specs:
        body = spec.split("\n\n", 1)[1].strip()  # drop the intro sentence every VerilogEval prompt shares
        assert not any(body in text for text in texts), body


def test_the_spec_text_check_catches_a_leaked_problem(corpora):
    """A training prompt rendered from an eval problem's parameters (as train_prompt does for a third of the records,
    under the design's own module name) contains that problem's spec body: the check above would fail on it."""
    lora = json.loads((corpora[1] / "manifest.json").read_text())
    problem = lora["eval"][0]
    design = build_design(problem["family"], problem["params"])
    leaked_prompt = eval_prompt(design, design.slug)
    spec = (corpora[1] / "eval" / f"{problem['problem']}_prompt.txt").read_text()
    assert spec.split("\n\n", 1)[1].strip() in leaked_prompt


def test_the_corpus_records_the_split_it_is_held_out_from():
    record = split_record()
    assert record["families"] == list(HELD_OUT_KINDS) and record["base_families"] == list(BASE_KINDS)
    assert record["base_corpus_seed"] == PretrainConfig().corpus_seed != 0  # the demo corpus's seed is 0


def test_an_unknown_task_kind_is_refused():
    with pytest.raises(ValueError, match=r"unknown task kinds \['no_such'\]: choose from boolean_function"):
        select_task_kinds(["no_such"])
