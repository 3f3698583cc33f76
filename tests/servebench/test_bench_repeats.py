"""`bench serve --repeats N`: one cell per (context, load) pooling every repeat's requests, each repeat with prompts of
its own, and Student-t 95 % intervals over the repeats (recomputed here with t's closed form for 2 degrees of
freedom)."""

from __future__ import annotations

import asyncio
import json
import math
import statistics

import pytest

from crosstune.servebench.sweep import SweepConfig, run_sweep
from tests.helpers.fake_openai import FakeOpenAI

# Student's t, 97.5th percentile, 2 degrees of freedom: with 2 degrees of freedom t_p = (2p − 1) / sqrt(2p(1 − p))
T_975_DF2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # 4.30265272974946


def test_repeats_pool_requests_and_give_intervals(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:
        cfg = SweepConfig(
            endpoint=server.url,
            model="ok",
            tokenizer=tiny_gemma4_dir,
            contexts=[16],
            concurrency=[2],
            output_len=4,
            num_requests=4,
            warmup=1,
            repeats=3,
            slo_ms={"p99_e2el_ms": 9e3},
        )
        summary = asyncio.run(run_sweep(cfg, tmp_path))
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [r["repeat"] for r in records] == [0] * 4 + [1] * 4 + [2] * 4 and len(server.requests) == 3 * 5
    assert len({r["prompt_sha256"] for r in records}) == 12  # each repeat draws prompts of its own
    (cell,) = summary["cells"]
    assert cell["completed"] == 12 and summary["repeats"] == 3 and len(cell["repeats"]) == 3
    assert cell["server"]["count_ttft"] == 12  # the /metrics windows of the 3 repeats, summed (warm-ups excluded)
    for key in ("output_throughput", "goodput", "p99_ttft_ms"):
        values = [r[key] for r in cell["repeats"]]
        found = cell["intervals"][key]
        half = T_975_DF2 * statistics.stdev(values) / math.sqrt(3)
        # the same float64 mean and sample deviation, summed in another order: each equal far inside 1e-9 of itself;
        # mean ∓ half may cancel to near 0 (repeats far apart on a loaded host), so the bound is on what was summed
        assert found["mean"] == pytest.approx(statistics.fmean(values), rel=1e-9)
        scale = abs(found["mean"]) + half
        assert found["low"] == pytest.approx(found["mean"] - half, abs=1e-9 * scale)
        assert found["high"] == pytest.approx(found["mean"] + half, abs=1e-9 * scale)
        assert found["n"] == 3 and found["confidence"] == 0.95
    # the pooled cell: throughput over the summed durations
    assert cell["request_throughput"] == pytest.approx(12 / cell["duration_s"], rel=1e-12)
