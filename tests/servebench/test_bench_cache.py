"""A benchmark the prefix cache cannot fool: fresh prompts per run (a seed recorded in the summary), the server's
prefix-cache counters per cell, a flag on a cold cell the cache served, a `--prefix-reuse` workload at a stated
ratio, and `bench compare` refusing a cold sweep next to a cached one. The server is the fake's, whose prefix cache
hashes 16-token blocks as vLLM does (tests/helpers/fake_openai.py); tests/servebench/test_bench_vllm.py is the same
against vLLM's CPU build."""

from __future__ import annotations

import asyncio
import json

from crosstune.servebench import prompt_cache
from crosstune.servebench.summary_cells import read_sweep
from crosstune.servebench.sweep import SweepConfig, run_sweep
from crosstune.servebench.sweep_comparison import compare_sweeps
from crosstune.servebench.workload import PromptMaker
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.serve import bench_args, cli, one_line_error


def sweep(folder, tokenizer, url, **kw):
    cfg = SweepConfig(endpoint=url, model="ok", tokenizer=tokenizer, **{"contexts": [40], "output_len": 4, **kw})
    summary = asyncio.run(run_sweep(cfg, folder))
    records = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    return summary, records


def workload_errors(*folders) -> list[str]:
    """What the one comparability rule (bench compare's and the report's) refuses of these sweeps."""
    return [f.text for f in compare_sweeps([read_sweep(f) for f in folders]) if f.level == "error"]


def test_two_sweeps_in_a_row_draw_fresh_seeds_and_different_prompts(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:
        a, ra = sweep(tmp_path / "a", tiny_gemma4_dir, server.url, num_requests=6, warmup=1)
        b, rb = sweep(tmp_path / "b", tiny_gemma4_dir, server.url, num_requests=6, warmup=1)
    assert a["seed"] != b["seed"] and a["seed_given"] is False and a["prompt_cache"] == "cold"
    assert len({r["prompt_sha256"] for r in ra + rb}) == 12  # no prompt sent twice
    for s in (a, b):  # 6 prompts of 40 tokens queried, none of their 2 full blocks seen before
        assert s["cells"][0]["prefix_cache"] == {
            "workload": "cold",
            "queries": 240.0,
            "hits": 0.0,
            "flag": None,
            "hit_rate": 0.0,
        }
    assert prompt_cache.sweep_kind(a) == prompt_cache.sweep_kind(b) == "cold"
    assert workload_errors(tmp_path / "a", tmp_path / "b") == []


def test_a_repeated_seed_against_one_server_is_flagged(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:
        first, r1 = sweep(tmp_path / "a", tiny_gemma4_dir, server.url, num_requests=4, warmup=0, seed=7)
        again, r2 = sweep(tmp_path / "b", tiny_gemma4_dir, server.url, num_requests=4, warmup=0, seed=7)
    assert [r["prompt_sha256"] for r in r1] == [r["prompt_sha256"] for r in r2]  # an exact rerun: the same prompts
    assert first["seed"] == again["seed"] == 7 and again["seed_given"] is True
    assert first["cells"][0]["prefix_cache"]["flag"] is None
    cache = again["cells"][0]["prefix_cache"]
    assert (cache["queries"], cache["hits"], cache["hit_rate"]) == (160.0, 128.0, 0.8)  # 2 of 2.5 blocks per prompt
    assert cache["flag"].startswith("128 of 160 prompt tokens were prefix-cache hits in a cold workload")
    assert prompt_cache.sweep_kind(again) == "a cold workload served from the cache (1 cell(s), 128 hit tokens)"
    [error] = workload_errors(tmp_path / "a", tmp_path / "b")
    assert "the sweeps differ in prompt cache — a: cold; b: a cold workload served from the cache" in error


def test_prefix_reuse_measures_the_cache_at_its_stated_ratio(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:
        summary, records = sweep(
            tmp_path, tiny_gemma4_dir, server.url, contexts=[64], num_requests=5, warmup=1, prefix_reuse=0.5
        )
        prompts = [body["prompt"] for body in server.requests]
    assert summary["prompt_cache"] == "prefix reuse 0.5" and summary["shared_prefix_tokens"] == {"64": 32}
    assert all(p[:32] == prompts[0][:32] for p in prompts) and len({tuple(p[32:]) for p in prompts}) == 6
    # the warm-up put the shared 2 blocks in the cache: each timed prompt hits exactly them, 32 of its 64 tokens
    assert summary["cells"][0]["prefix_cache"] == {
        "workload": "prefix reuse 0.5",
        "queries": 320.0,
        "hits": 160.0,
        "flag": None,
        "hit_rate": 0.5,
    }
    assert len(records) == 5 and all(r["ok"] for r in records)


def test_chat_prompts_share_an_exact_prefix(tiny_gemma4_dir):
    maker = PromptMaker(tiny_gemma4_dir, seed=3, prefix_reuse=0.25)
    texts = [maker.text_of_length(48) for _ in range(3)]
    encode = maker.tokenizer.encode
    ids = [encode(t, add_special_tokens=False) for t in texts]
    assert all(len(i) == 48 for i in ids) and all(i[:12] == ids[0][:12] for i in ids)
    assert len({tuple(i[12:]) for i in ids}) == 3


def test_compare_refuses_a_cold_sweep_next_to_a_cached_one(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:
        for name, extra in (("cold", ()), ("cold2", ()), ("reuse", ("--prefix-reuse", "0.5"))):
            result = cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(tmp_path / name), *extra))
            assert result.exit_code == 0, result.output
            kind = "prefix reuse 0.5" if extra else "cold"
            assert f"prompts: {kind} workload, seed " in result.output and "(fresh)" in result.output
    ok = cli("bench", "compare", str(tmp_path / "cold"), str(tmp_path / "cold2"))
    assert ok.exit_code == 0, ok.output
    line = one_line_error(cli("bench", "compare", str(tmp_path / "cold"), str(tmp_path / "reuse")))
    assert f"prompt cache — A ({tmp_path / 'cold'}): cold; B ({tmp_path / 'reuse'}): prefix reuse 0.5" in line
    assert "compare sweeps of one kind" in line


def test_options_are_checked(tmp_path, tiny_gemma4_dir):
    for extra, expected in (
        (("--prefix-reuse", "1"), "--prefix-reuse: 1.0 is not a share of the prompt strictly between 0 and 1"),
        (("--seed", "-1"), "--seed: -1 is not a whole number >= 0"),
        (("--repeats", "0"), "--repeats: 0 is not a whole number >= 1"),
    ):
        line = one_line_error(cli(*bench_args("http://127.0.0.1:9", tiny_gemma4_dir, *extra)))
        assert expected in line, line
