"""`crosstune bench serve` against the fake server: exact lengths, vLLM's metric definitions (recomputed by an
independent function, tests/helpers/serve.py), the naive-client mistakes, and faults (500s, stalls, cut streams, a
dying server)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from crosstune.servebench.request_metrics import stats_ms
from crosstune.servebench.sweep import SweepConfig, run_sweep
from crosstune.servebench.workload import arrival_times
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.serve import recompute


def sweep(tmp_path, tokenizer, url, model="ok", **kw):
    cfg = SweepConfig(endpoint=url, model=model, tokenizer=tokenizer, **{"contexts": [16], "output_len": 8, **kw})
    summary = asyncio.run(run_sweep(cfg, tmp_path))
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    return summary, records


def test_sweep_exact_lengths_and_summary_recomputed(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:
        summary, records = sweep(
            tmp_path, tiny_gemma4_dir, server.url, contexts=[16, 40], concurrency=[1, 3], num_requests=6, warmup=1
        )
    assert len(server.requests) == 4 * (6 + 1) and len(records) == 4 * 6  # warm-ups sent, not recorded
    for body in server.requests:  # a prompt of exactly the labelled context, an output of exactly 8 tokens
        assert len(body["prompt"]) in (16, 40) and all(isinstance(t, int) for t in body["prompt"])
        assert body["max_tokens"] == 8 and body["ignore_eos"] is True and body["stream_options"]["include_usage"]
    assert all(r["ok"] and r["completion_tokens"] == 8 and r["prompt_tokens"] == r["context_len"] for r in records)
    assert all(r["ttft_s"] <= r["e2el_s"] for r in records)
    assert [(c["context_len"], c["concurrency"]) for c in summary["cells"]] == [(16, 1), (16, 3), (40, 1), (40, 3)]
    for cell in summary["cells"]:
        key = (cell["context_len"], cell["concurrency"])
        mine = [r for r in records if (r["context_len"], r["concurrency"]) == key]
        want = recompute(mine, cell["duration_s"])
        for key, value in want.items():
            # Same float64 sums in a different order: equal to ~1e-15 relative, far inside 1e-9.
            assert cell[key] == pytest.approx(value, rel=1e-9), key
        assert cell["server"]["count_ttft"] == 6  # /metrics delta covers the timed requests, not the warm-up
    assert set(summary["saturation"]) == {"16", "40"}


def test_chunks_are_not_tokens(tmp_path, tiny_gemma4_dir):
    """A chunk may carry several tokens: output tokens come from usage, TPOT divides by tokens − 1, not chunks."""
    with FakeOpenAI() as server:
        summary, records = sweep(tmp_path, tiny_gemma4_dir, server.url, model="burst", num_requests=3, warmup=0)
    for r in records:
        assert r["completion_tokens"] == 8 and r["chunk_tokens"] == [2, 2, 2, 2] and len(r["itl_s"]) == 3
        assert r["tpot_s"] == pytest.approx((r["e2el_s"] - r["ttft_s"]) / 7)
    cell = summary["cells"][0]
    assert cell["total_output_tokens"] == 24 and cell["chunks"]["multi_token_chunk_share"] == 1.0


def test_ignore_eos_sent_and_short_completions_fail(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:
        ok, _ = sweep(tmp_path / "a", tiny_gemma4_dir, server.url, model="noeos", num_requests=2, warmup=0)
        short, records = sweep(tmp_path / "b", tiny_gemma4_dir, server.url, model="short", num_requests=2, warmup=0)
    assert ok["cells"][0]["completed"] == 2  # the server stops at EOS unless ignore_eos: the client asks for it
    assert short["cells"][0]["completed"] == 0 and short["cells"][0]["failures"] == {"short completion": 2}
    assert records[0]["error"].startswith("short completion: 7 of 8 output tokens")


def test_truncated_prompt_is_not_a_long_context(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:
        summary, records = sweep(tmp_path, tiny_gemma4_dir, server.url, model="truncate", contexts=[100], warmup=0)
    assert summary["cells"][0]["completed"] == 0
    assert records[0]["error"] == "prompt length mismatch: 64 tokens on the server, 100 requested"


@pytest.mark.parametrize(
    ("model", "reason"),
    [("error", "HTTP 500"), ("stall", "timeout"), ("cut", "dropped stream")],
)
def test_faults_recorded_per_request(tmp_path, tiny_gemma4_dir, model, reason):
    with FakeOpenAI() as server:
        summary, records = sweep(
            tmp_path,
            tiny_gemma4_dir,
            server.url,
            model=model,
            num_requests=2,
            warmup=0,
            timeout_s=0.5 if model == "stall" else 30,  # only the stall may time out, however loaded the box
        )
    cell = summary["cells"][0]
    assert cell["completed"] == 0 and cell["failures"] == {reason: 2} and summary["aborted"] is None
    assert all(r["error"].startswith(reason) for r in records)


def test_dying_server_ends_sweep_with_partial_results(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI(die_after=4) as server:
        summary, records = sweep(
            tmp_path, tiny_gemma4_dir, server.url, concurrency=[1, 2, 4], num_requests=4, warmup=0, timeout_s=5
        )
    assert [c["completed"] for c in summary["cells"]] == [4, 0]  # the third level never ran
    assert "stopped answering" in summary["aborted"] and len(records) == 8


def test_concurrency_is_a_semaphore_not_batches(tmp_path, tiny_gemma4_dir):
    """The server answers the first request only once the sixth has arrived: a client whose finished request frees
    its slot at once sends the 3rd to 6th through the other slot meanwhile; a batch-synchronous one would wait for the
    first to send the third (and the first would time out). Shown by the server's order of events, not by timings."""
    with FakeOpenAI(hold_first_until=6) as server:
        _, records = sweep(tmp_path, tiny_gemma4_dir, server.url, concurrency=[2], num_requests=6, warmup=0)
    assert all(r["ok"] for r in records)
    assert server.events.index(("end", 1)) > server.events.index(("start", 6))
    assert server.max_in_flight == 2  # the held one and the other slot; never more than the concurrency


def test_arrival_process_matches_vllm():
    t = arrival_times(4000, rate=10.0, seed=1)
    gaps = np.diff([0.0, *t])
    assert t[-1] == pytest.approx(400.0) and np.all(gaps > 0)  # last arrival rescaled to n / rate
    # Poisson gaps: coefficient of variation 1; Gamma(b=4): 1/sqrt(4). 4000 samples: CV's error ~ 2-3 %.
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.08)
    g4 = np.diff([0.0, *arrival_times(4000, rate=10.0, burstiness=4.0, seed=1)])
    assert np.std(g4) / np.mean(g4) == pytest.approx(0.5, abs=0.05)
    assert arrival_times(3, float("inf")) == [0.0, 0.0, 0.0]


def test_percentiles_interpolate_not_index():
    s = stats_ms([float(i) for i in range(1, 11)], "e2el")  # seconds 1..10
    assert s["p99_e2el_ms"] == pytest.approx(9910.0)  # sorted(x)[int(0.99 * 10)] would say 10000
    assert s["median_e2el_ms"] == pytest.approx(5500.0) and s["p90_e2el_ms"] == pytest.approx(9100.0)


def cli_app():
    from crosstune.cli import _register, app

    if not any(c.name == "export" for c in app.registered_commands):
        _register()
    return app


def test_cli_bench_serve_plots_and_compare(tmp_path, tiny_gemma4_dir):
    from typer.testing import CliRunner

    runner = CliRunner()
    with FakeOpenAI() as server:
        for name, model in (("a", "ok"), ("b", "burst")):
            args = [
                "bench",
                "serve",
                "--endpoint",
                server.url,
                "--model",
                model,
                "--tokenizer",
                str(tiny_gemma4_dir),
                "--contexts",
                "16,32",
                "--concurrency",
                "1,2",
                "--output-len",
                "8",
                "--num-requests",
                "3",
                "--warmup",
                "0",
                "--out",
                str(tmp_path / name),
                "--slo",
                "p99_ttft_ms=60000",
            ]
            result = runner.invoke(cli_app(), args)
            assert result.exit_code == 0, result.output
    assert {p.name for p in (tmp_path / "a").glob("*.png")} == {
        "throughput_vs_load.png",
        "ttft_vs_context.png",
        "latency_vs_throughput.png",
        "pareto.png",
    }
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert all(c["goodput"] == pytest.approx(c["request_throughput"]) for c in summary["cells"])  # a lax SLO: all good
    result = runner.invoke(cli_app(), ["bench", "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert "output_throughput" in result.output and "×" in result.output


def test_request_rate_cells_dispatch_on_the_arrival_process(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:
        summary, records = sweep(tmp_path, tiny_gemma4_dir, server.url, rates=[40.0], num_requests=8, warmup=0)
    cell = summary["cells"][0]
    assert cell["request_rate"] == 40.0 and cell["concurrency"] is None and cell["completed"] == 8
    offsets = arrival_times(8, 40.0, 1.0, summary["seed"] + 16)  # the cell's schedule (seed: the sweep's + context)
    assert offsets[-1] == pytest.approx(0.2) and offsets[0] > 0  # the last arrival rescaled to n / rate
    # nobody is sent before its arrival (asyncio.sleep never wakes early on the loop's clock; a loaded box wakes it
    # late, by any amount): no batch at t=0
    assert all(r["dispatch_s"] >= offsets[r["index"]] - 1e-6 for r in records)


def test_chat_prompts_checked_against_the_template_length(tmp_path, tiny_gemma4_dir):
    from crosstune.servebench.workload import PromptMaker

    maker = PromptMaker(tiny_gemma4_dir)
    with FakeOpenAI() as server:
        server.chat_tokens = maker.chat_prompt_tokens  # what vLLM reports: the chat template applied
        summary, records = sweep(
            tmp_path / "a", tiny_gemma4_dir, server.url, api="chat", contexts=[48], warmup=0, num_requests=3
        )
        server.chat_tokens = lambda text: len(maker.tokenizer.encode(text, add_special_tokens=False))
        wrong, _ = sweep(
            tmp_path / "b", tiny_gemma4_dir, server.url, api="chat", contexts=[48], warmup=0, num_requests=1
        )
    assert summary["cells"][0]["completed"] == 3
    body = server.requests[0]
    assert body["max_completion_tokens"] == 8 and body["ignore_eos"] and "max_tokens" not in body
    assert len(maker.tokenizer.encode(body["messages"][0]["content"], add_special_tokens=False)) == 48
    assert all(r["prompt_tokens"] > 48 for r in records)  # 48 content tokens + the template's own
    assert wrong["cells"][0]["failures"] == {"prompt length mismatch": 1}  # the template's tokens not counted


def test_a_tokenizer_folder_transformers_cannot_load_is_one_line_naming_it(tiny_gemma4_dir, tmp_path):
    # a wrong type in its config.json left huggingface_hub's StrictDataclassError as a traceback (found by the fuzzer)
    import shutil

    from crosstune.servebench.sweep_config import BenchError
    from crosstune.servebench.workload import PromptMaker

    tok = shutil.copytree(tiny_gemma4_dir, tmp_path / "tok")
    config = json.loads((tok / "config.json").read_text())
    config["layer_types"] = [float("inf"), *config["layer_types"][1:]]
    (tok / "config.json").write_text(json.dumps(config))
    with pytest.raises(BenchError, match=rf"^--tokenizer {tok}: no tokenizer can be loaded from it \("):
        PromptMaker(tok)
