"""The demo's evaluation stage compares models only when one engine produced every evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest

from crosstune.demo.evaluation import ModelScore, one_engine
from crosstune.evals.runner import EvalError


def score(label: str, engine: str | None) -> ModelScore:
    summary = {"pass_at_k": {"1": 0.5}, **({"engine": {"name": engine}} if engine else {})}
    return ModelScore(label, Path(label), summary, summary)


def test_one_engine_names_the_shared_engine_and_refuses_a_mix():
    assert one_engine([score("base", "transformers 5.12.1"), score("torch", "transformers 5.12.1")]) == (
        "transformers 5.12.1"
    )
    with pytest.raises(EvalError, match="different engines: \\['transformers 5.12.1', 'vllm 0.11.0'\\]"):
        one_engine([score("base", "transformers 5.12.1"), score("jax", "vllm 0.11.0")])
    with pytest.raises(EvalError, match="different engines"):
        one_engine([score("base", None)])
