"""`bench serve --find-max-rate SLO`: the search's steps on a known threshold, and the whole search against the fake
server with one prefill slot (tests/helpers/fake_openai.py, `prefill_s`), whose TTFT grows with the request rate as
a queue does: the rate it finds is within one step of the rate the queue's arithmetic gives."""

from __future__ import annotations

import json

import pytest

from crosstune.servebench import max_rate
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.serve import cli, one_line_error


def search(threshold: float, start: float, resolution: float = 0.1, steps: int = 8) -> list[max_rate.Step]:
    done: list[max_rate.Step] = []
    while (rate := max_rate.next_rate(done, start, resolution, steps)) is not None:
        done.append(max_rate.Step(rate, rate <= threshold))
    return done


def test_the_search_doubles_then_bisects_within_its_steps():
    steps = search(27.4, start=10)
    # doubling to the first miss, then geometric bisection until missed / met <= 1.1 (28.28 / 25.94 = 1.09)
    assert [round(s.rate, 2) for s in steps] == [10, 20, 40, 28.28, 23.78, 25.94]
    found = max_rate.result(steps, 0.1)
    assert (found["max_rate"], found["missed_at"], found["converged"]) == (steps[5].rate, steps[3].rate, True)
    # the steps run out before the bracket narrows: the answer is the bracket it reached, not converged
    short = max_rate.result(search(27.4, start=10, steps=4), 0.1)
    assert (short["max_rate"], short["missed_at"], short["converged"]) == (20, pytest.approx(28.28, abs=0.01), False)
    assert max_rate.result(search(0.3, start=10, steps=5), 0.1)["max_rate"] is None  # 10, 5, 2.5, 1.25, 0.625 all miss
    assert max_rate.describe("64", max_rate.result(steps, 0.1)) == (
        "context 64: 25.9 req/s meets the SLO, 28.3 misses it (6 cells)"
    )


# The verdict is the queue's, not the host's: a long prefill (80 ms) makes the median TTFT grow 7.5 × (prefill − 1/r),
# ~60 ms per req/s near the answer. A loaded host adds 20–50 ms to every request's TTFT (measured at load average 10
# on 2 cores) and single stalls of ~100 ms, which the median (unlike a p99 of 16) ignores; the answer is computed from
# the unloaded TTFT the first cell measured (rate 10 < 1 / prefill: no queue), so what the host adds is in it.
PREFILL_S, FIRST_TOKEN_S, LIMIT_MS, REQUESTS = 0.080, 0.002, 322.0, 16


def known_max_rate(unloaded_ms: float) -> float:
    """The rate at which the fake's queue puts the median TTFT at the limit. With arrivals 1/r apart and one prefill
    slot of PREFILL_S, request k waits k·(PREFILL_S − 1/r) on top of the unloaded TTFT (PREFILL_S + FIRST_TOKEN_S +
    what the host adds); the median of 16 sits at k = 7.5."""
    margin = (LIMIT_MS - unloaded_ms) / 1000
    return 1.0 / (PREFILL_S - margin / ((REQUESTS - 1) / 2))


def test_find_max_rate_on_a_server_whose_latency_grows_with_load(tmp_path, tiny_gemma4_dir):
    assert known_max_rate(1000 * (PREFILL_S + FIRST_TOKEN_S)) == pytest.approx(20.83, abs=0.01)  # on an idle host
    with FakeOpenAI(prefill_s=PREFILL_S, token_delay_s=FIRST_TOKEN_S) as server:
        result = cli(
            "bench",
            "serve",
            "--endpoint",
            server.url,
            "--model",
            "ok",
            "--tokenizer",
            str(tiny_gemma4_dir),
            "--contexts",
            "16",
            "--output-len",
            "2",
            "--num-requests",
            str(REQUESTS),
            "--warmup",
            "0",
            "--burstiness",
            "1000",
            "--rates",
            "10",
            "--find-max-rate",
            f"median_ttft_ms={LIMIT_MS:g}",
            "--out",
            str(tmp_path / "b"),
        )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    found = summary["max_rate"]["16"]
    lo, hi = found["max_rate"], found["missed_at"]
    first = summary["cells"][0]
    assert first["request_rate"] == 10 and found["steps"][0]["met"]
    answer = known_max_rate(first["median_ttft_ms"])
    # burstiness 1000: gaps within ~3 % of 1/r, so the queue is the arithmetic's; the bracket is one step wide
    assert found["converged"] and hi / lo <= 1.1
    assert lo / 1.1 <= answer <= hi * 1.1, (lo, hi, answer)  # the known answer within one step of the bracket
    assert len(summary["cells"]) == len(found["steps"]) <= 8
    assert [c["request_rate"] for c in summary["cells"]] == [s["rate"] for s in found["steps"]]
    assert all(c["slo_ms"] == {"median_ttft_ms": LIMIT_MS} and "goodput" in c for c in summary["cells"])
    assert f"context 16: {lo:.3g} req/s meets the SLO, {hi:.3g} misses it" in result.output


def test_find_max_rate_needs_an_slo_of_its_own(tmp_path, tiny_gemma4_dir):
    base = ["bench", "serve", "--endpoint", "http://127.0.0.1:9", "--model", "ok", "--tokenizer", str(tiny_gemma4_dir)]
    line = one_line_error(cli(*base, "--find-max-rate", "p99_ttft_ms=80", "--slo", "p99_ttft_ms=80"))
    assert "--find-max-rate names the SLO the search meets: give it there, not also as --slo" in line
    line = one_line_error(cli(*base, "--find-max-rate", "ttft=80"))
    assert "--find-max-rate 'ttft=80': unknown SLO name 'ttft'" in line
    line = one_line_error(cli(*base, "--find-max-rate", "p99_ttft_ms=80", "--rates", "1,2"))
    assert "--rates gives the one rate the search starts at, not a list" in line
