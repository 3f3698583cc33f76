"""The prefix-cache trap against vLLM's CPU build (`make test-serve`; one server, ~1 min): two sweeps in a row draw
different prompts and neither hits the cache; a forced repeated seed is flagged; a `--prefix-reuse` sweep shows its
hits in the summary at the ratio vLLM's 128-token CPU blocks allow."""

from __future__ import annotations

import asyncio
import json

import pytest

from crosstune.serve.engine import vllm_binary
from crosstune.servebench.sweep import SweepConfig, run_sweep
from tests.helpers.ports import free_port

pytestmark = [
    pytest.mark.serve,
    pytest.mark.skipif(vllm_binary() is None, reason="the serving environment .venv-serve is absent: `make serve-env`"),
]
CPU_BLOCK = 128  # vLLM's CPU backend: block_size 128 unless given (vllm/platforms/cpu.py); a hit is a whole block


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_gemma4_dir):
    from crosstune.serve.process import start_server, stop_server

    state_dir = tmp_path_factory.mktemp("vllm") / "server"
    try:
        yield start_server(tiny_gemma4_dir, state_dir, name="tiny", port=free_port(), max_model_len=1024)
    finally:
        stop_server(state_dir)


def sweep(folder, tokenizer, url, **kw) -> tuple[dict, list[dict]]:
    kw = {"warmup": 1, **kw}
    cfg = SweepConfig(
        endpoint=url,
        model="tiny",
        tokenizer=tokenizer,
        contexts=[512],
        concurrency=[2],
        output_len=8,
        num_requests=6,
        **kw,
    )
    summary = asyncio.run(run_sweep(cfg, folder))
    records = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    assert all(r["ok"] for r in records), [r["error"] for r in records if not r["ok"]]
    return summary, records


def test_fresh_seeds_stay_cold_a_repeated_seed_is_flagged_and_prefix_reuse_hits(server, tmp_path, tiny_gemma4_dir):
    a, ra = sweep(tmp_path / "a", tiny_gemma4_dir, server.base_url)
    b, rb = sweep(tmp_path / "b", tiny_gemma4_dir, server.base_url)
    assert a["seed"] != b["seed"] and len({r["prompt_sha256"] for r in ra + rb}) == 12
    for s in (a, b):
        cache = s["cells"][0]["prefix_cache"]
        assert cache["queries"] == 6 * 512 and cache["hits"] == 0 and cache["flag"] is None, cache

    seeded, _ = sweep(tmp_path / "c", tiny_gemma4_dir, server.base_url, seed=a["seed"])  # a's prompts, again
    cache = seeded["cells"][0]["prefix_cache"]
    # every prompt was served before: all its blocks but the last (vLLM recomputes the last token) hit
    assert cache["hits"] == 6 * (512 - CPU_BLOCK) and cache["flag"].startswith("2,304 of 3,072 prompt tokens"), cache

    # vLLM (CPU, this sliding + global model) hits a prefix from its third sighting on: measured with warm-ups 0, 1
    # and 2, 4, 5 and 6 of 6 timed prompts hit; two warm-ups make every timed prompt a hit
    reuse, _ = sweep(tmp_path / "d", tiny_gemma4_dir, server.base_url, prefix_reuse=0.5, warmup=2)
    cache = reuse["cells"][0]["prefix_cache"]
    # the shared 256 tokens are 2 whole blocks: each timed prompt hits exactly them
    assert reuse["shared_prefix_tokens"] == {"512": 256} and cache["flag"] is None
    assert (cache["hits"], cache["hit_rate"]) == (6 * 256, 0.5), cache
    cold, repeated = a["cells"][0]["prefix_cache"], seeded["cells"][0]["prefix_cache"]
    print(f"vLLM prefix cache: cold {cold}, seed repeated {repeated}, prefix reuse 0.5 {cache}")  # `pytest -rP`
