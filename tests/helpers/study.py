"""A study of the tiny recipe on the session's tiny model and corpus, as the study tests run it."""

from __future__ import annotations

import time

from rich.console import Console

from crosstune.study.runner import run_study
from tests.helpers.paths import RECIPES

STEPS = 2


def overrides(model_dir, corpus_dir, *extra: str) -> list[str]:
    return [
        f"model.path={model_dir}",
        f"data.sources=[{{path: {corpus_dir / 'train.jsonl'}}}]",
        f"eval.problems={corpus_dir / 'eval'}",
        f"train.max_steps={STEPS}",
        "train.checkpoint_every=1",
        "data.max_seq_len=512",
        "data.truncation=truncate",
        "eval.samples=1",
        "eval.k=[1]",
        "eval.max_tokens=16",
        *extra,
    ]


def study(bundle, sets, backend="torch", recipe=RECIPES / "tiny-cpu.yaml", **kwargs):
    console = Console(record=True, width=200)
    t0 = time.perf_counter()
    manifest = run_study(recipe, backend, bundle, overrides=sets, console=console, **kwargs)
    return manifest, console.export_text(), time.perf_counter() - t0
