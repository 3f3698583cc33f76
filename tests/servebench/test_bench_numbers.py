"""Numbers that mean what they say: bursty streams marked (client TTFT/ITL/TPOT are not server figures then),
/metrics percentiles given as their buckets, one SLO spelling with cost/report, loads named by what was swept, and
one-line errors for bad options."""

from __future__ import annotations

import asyncio
import json

import pytest

from crosstune.servebench.client import RequestRecord
from crosstune.servebench.request_metrics import saturation
from crosstune.servebench.server_metrics import delta, parse
from crosstune.servebench.sweep import SweepConfig, run_sweep
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.serve import bench_args, cli, one_line_error


def record(itl_s: list[float], chunk_tokens: list[int]) -> RequestRecord:
    r = RequestRecord(16, 1, None, 0, 16, sum(chunk_tokens), ttft_s=0.1, e2el_s=0.2)
    r.itl_s, r.chunk_tokens, r.completion_tokens = itl_s, chunk_tokens, sum(chunk_tokens)
    return r


def test_largest_burst_share_counts_tokens_of_chunks_closer_than_a_millisecond():
    from crosstune.servebench.request_metrics import largest_burst_share

    assert largest_burst_share(record([0.01, 0.01, 0.01], [1, 1, 1, 1])) == 0.25  # a steady stream
    assert largest_burst_share(record([0.05, 0.0001, 0.0002], [1, 1, 1, 1])) == 0.75  # first token, then a flush
    assert largest_burst_share(record([0.0001], [1, 3])) == 1.0  # a multi-token chunk is a burst of its own
    assert largest_burst_share(record([], [1])) is None  # one token: no gap to judge


def test_a_flushed_stream_marks_the_cells_client_timings(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI(token_delay_s=0.02) as server:
        result = cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(tmp_path / "b"), model="flush"))
    assert result.exit_code == 0, result.output
    cell = json.loads((tmp_path / "b" / "summary.json").read_text())["cells"][0]
    assert cell["bursty_stream_share"] == 1.0 and cell["client_timing_reliable"] is False
    said = " ".join(result.output.split())
    assert "* the client received most streams of this cell in one burst" in said
    assert "use the server's /metrics figures" in said
    compared = cli("bench", "compare", str(tmp_path / "b"), str(tmp_path / "b"))
    assert compared.exit_code == 0, compared.output
    lines = compared.output.splitlines()  # 80 columns: each metric's row whole, its bursty sides a short mark
    assert any("request_throughput" in line and line.rstrip("│ ").endswith("1.00×") for line in lines), lines
    assert any("median_ttft_ms" in line and line.rstrip("│ ").endswith("A, B") for line in lines), lines
    assert "* bursty: in the sweep(s) named, the client received most streams" in " ".join(compared.output.split())


def test_server_percentiles_carry_their_bucket():
    text = (
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{le="0.1"} 0\n'
        'vllm:e2e_request_latency_seconds_bucket{le="0.3"} 10\n'
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 10\n'
        "vllm:e2e_request_latency_seconds_count 10\nvllm:e2e_request_latency_seconds_sum 1.7\n"
    )
    got = delta({}, parse(text))
    assert got["mean_e2el_ms"] == pytest.approx(170.0)  # exact: sum / count
    assert got["median_e2el_ms"] == pytest.approx(200.0)  # interpolated, not measured ...
    assert got["median_e2el_bucket_ms"] == pytest.approx([100.0, 300.0])  # ... the truth is somewhere in here
    assert "bucket" in got["note"]


def test_the_table_shows_server_percentiles_as_buckets(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:  # its TTFT histogram has one finite bucket: le 0.01 s
        result = cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(tmp_path / "b")))
    assert result.exit_code == 0, result.output
    assert "0–10" in result.output and "the true value lies in the bucket shown" in " ".join(result.output.split())


def test_slo_is_spelt_one_way_and_parsed_by_one_parser():
    """servebench.slo.parse_slo is the parser of `bench serve`, `cost serve` and `report`
    (tests/cost/test_inputs.py)."""
    from crosstune.servebench.slo import SloError, parse_slo

    assert parse_slo(["p99_ttft_ms=2000", "median_tpot_ms=50"]) == {"p99_ttft_ms": 2000.0, "median_tpot_ms": 50.0}
    for item, message in (
        ("ttft=2000", "unknown SLO name 'ttft' (write p99_ttft_ms=… for the p99)"),
        ("p99_ttft_ms=-5", "an SLO must be a positive, finite number of milliseconds"),
        ("p99_ttft_ms=0", "an SLO must be a positive, finite number of milliseconds"),
        ("p99_ttft_ms=nan", "an SLO must be a positive, finite number of milliseconds"),
        ("p99_ttft_ms=inf", "an SLO must be a positive, finite number of milliseconds"),
        ("=5", "expected NAME=MILLISECONDS with NAME <stat>_<metric>_ms, e.g. p99_ttft_ms=2000"),
        ("p99_ttft_ms=fast", "'fast' is not a number of milliseconds"),
        ("p99_ttft_ms", "expected NAME=MILLISECONDS with NAME <stat>_<metric>_ms, e.g. p99_ttft_ms=2000"),
    ):
        with pytest.raises(SloError, match=message.replace("(", r"\(").replace(")", r"\)")):
            parse_slo([item])
    with pytest.raises(SloError, match="p99_ttft_ms given twice"):
        parse_slo(["p99_ttft_ms=1", "p99_ttft_ms=2"])


def test_bench_serve_takes_the_cost_spelling_and_judges_cells_and_requests(tmp_path, tiny_gemma4_dir):
    with FakeOpenAI() as server:
        result = cli(
            *bench_args(server.url, tiny_gemma4_dir, "--out", str(tmp_path / "b"), "--slo", "p99_ttft_ms=60000")
        )
        strict = cli(
            *bench_args(server.url, tiny_gemma4_dir, "--out", str(tmp_path / "c"), "--slo", "p99_e2el_ms=0.001")
        )
    assert result.exit_code == 0 and strict.exit_code == 0, result.output + strict.output
    lax = json.loads((tmp_path / "b" / "summary.json").read_text())["cells"][0]
    assert lax["slo_misses"] == [] and lax["goodput"] == pytest.approx(lax["request_throughput"])
    tight = json.loads((tmp_path / "c" / "summary.json").read_text())["cells"][0]
    assert tight["goodput"] == 0.0 and tight["slo_misses"][0].startswith("p99_e2el_ms ")
    line = one_line_error(cli(*bench_args("http://127.0.0.1:9", tiny_gemma4_dir, "--slo", "p99_ttft_ms=-1")))
    assert line == "error: --slo 'p99_ttft_ms=-1': an SLO must be a positive, finite number of milliseconds"


def test_rate_sweeps_name_saturation_by_the_rate(tmp_path, tiny_gemma4_dir):
    cells = [
        {
            "context_len": 16,
            "concurrency": 8,
            "request_rate": r,
            "completed": 4,
            "output_throughput": t,
            "p99_ttft_ms": 1,
        }
        for r, t in ((2.0, 30.0), (8.0, 90.0), (32.0, 90.0))
    ]
    assert saturation(cells)["16"]["load"] == "rate 8 req/s, at most 8 in flight"  # a tie goes to the lower rate
    with FakeOpenAI() as server:
        result = cli(
            *bench_args(
                server.url, tiny_gemma4_dir, "--rates", "40", "--max-concurrency", "8", "--out", str(tmp_path / "b")
            )
        )
    assert result.exit_code == 0, result.output
    assert "saturation at context 16: rate 40 req/s, at most 8 in flight →" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--contexts", "abc"], "error: --contexts 'abc': 'abc' is not an integer (comma-separated, e.g. 1,4)"),
        (["--contexts", "0"], "error: --contexts '0': 0 is below 1"),
        (["--rates", "abc"], "error: --rates 'abc': 'abc' is not a number of requests per second"),
        (["--rates", "0"], "error: --rates '0': 0 is not a positive, finite request rate"),
        (["--concurrency", "0"], "error: --concurrency '0': 0 is below 1"),
        (["--concurrency", "-1"], "error: --concurrency '-1': -1 is below 1"),
        (["--timeout", "0"], "error: --timeout: 0.0 is not a number > 0 and <= 86400 (seconds per request)"),
        (["--max-concurrency", "4"], "error: --max-concurrency caps a --rates sweep"),
    ],
)
def test_bad_options_are_one_line_errors_naming_the_option(tmp_path, tiny_gemma4_dir, args, message):
    with FakeOpenAI() as server:
        line = one_line_error(cli(*bench_args(server.url, tiny_gemma4_dir, *args, "--out", str(tmp_path / "b"))))
    assert line.startswith(message), line
    assert server.requests == []


def test_a_missing_or_unloadable_tokenizer_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with FakeOpenAI() as server:
        for tok, message in (
            (tmp_path / "nope", f"error: --tokenizer {tmp_path / 'nope'}: no such folder"),
            (tmp_path / "empty", f"error: --tokenizer {tmp_path / 'empty'}: no tokenizer can be loaded from it"),
        ):
            assert one_line_error(cli(*bench_args(server.url, tok, "--out", str(tmp_path / "b")))).startswith(message)
    assert server.requests == []


def test_the_python_api_checks_its_config_too(tmp_path, tiny_gemma4_dir):
    from crosstune.servebench.sweep import BenchError

    cfg = SweepConfig(
        endpoint="http://127.0.0.1:9", model="m", tokenizer=tiny_gemma4_dir, contexts=[16], concurrency=[0]
    )
    with pytest.raises(BenchError, match="--concurrency: 0 is not an integer >= 1"):
        asyncio.run(run_sweep(cfg, tmp_path / "b"))
    assert not (tmp_path / "b").exists()
