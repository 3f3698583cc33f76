"""A study's (and the demo's) sweep is `bench serve`'s: servebench.bench.run_bench with its staged folder, manifest and
failures — a cell without a successful request fails the stage as it exits `bench serve` 1, nothing succeeding
leaves the folder as it was, and a rerun replaces the earlier sweep."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from rich.console import Console

from crosstune.servebench.sweep import BenchError
from crosstune.study.serving import sweep
from tests.helpers.fake_openai import FakeOpenAI


def grid(server: FakeOpenAI, tokenizer, out, model: str = "ok", contexts=(16,)) -> dict:
    kv = {"device": "CPU", "tokens": 316551, "max_concurrency": 309.13, "max_model_len": 1024, "blocks": None}
    # as start_server gives
    state = SimpleNamespace(base_url=server.url, model=model, lora_name=None, kv_cache=kv, drafter=None)
    console = Console(record=True, width=300)
    return sweep(
        state,
        tokenizer,
        out,
        console,
        contexts=list(contexts),
        concurrency=[1],
        output_len=8,
        num_requests=2,
        label="study",
        target="cpu",
    )


def test_the_study_sweep_writes_what_bench_serve_writes(tmp_path, tiny_gemma4_dir):
    out = tmp_path / "bench"
    with FakeOpenAI() as server:
        summary = grid(server, tiny_gemma4_dir, out)
        again = grid(server, tiny_gemma4_dir, out, contexts=(16, 32))  # the stage redone: its earlier sweep replaced
    assert [c["completed"] for c in summary["cells"]] == [2] and [c["completed"] for c in again["cells"]] == [2, 2]
    manifest = json.loads((out / "bench_manifest.json").read_text())
    assert manifest["made_by"] == "crosstune bench serve" and manifest["complete"] is True
    assert {"summary.json", "requests.jsonl"} <= set(manifest["files"]) and any(
        f.endswith(".png") for f in manifest["files"]
    )
    assert json.loads((out / "summary.json").read_text())["cells"] == again["cells"]
    assert summary["server_kv_cache"]["tokens"] == 316551  # the KV cache the server logged, carried into the summary


def test_a_cell_without_a_successful_request_fails_the_stage_as_it_fails_bench_serve(tmp_path, tiny_gemma4_dir):
    """The fixture's `truncate` cuts prompts to 64 tokens: context 16 succeeds, every request of context 100 fails."""
    out = tmp_path / "bench"
    with FakeOpenAI() as server, pytest.raises(BenchError) as failed:
        grid(server, tiny_gemma4_dir, out, model="truncate", contexts=(16, 100))
    assert str(failed.value).startswith("context 100, concurrency 1: no successful request: 2 × skipped (first: ")
    assert str(failed.value).endswith(f"(the sweep is kept in {out})")
    assert [c["completed"] for c in json.loads((out / "summary.json").read_text())["cells"]] == [2, 0]
    other = tmp_path / "nothing"
    with FakeOpenAI() as server, pytest.raises(BenchError, match=r"^no request succeeded \(context 16"):
        grid(server, tiny_gemma4_dir, other, model="error")
    assert not other.exists()
