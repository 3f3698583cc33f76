"""`bench serve --find-max-rate SLO`: the search's steps on a known threshold; the whole search against a server with
one prefill slot, whose TTFT grows with the request rate as a queue does, run on a virtual clock
(tests/helpers/virtual_clock.py) so that every TTFT the client measures is the queue's to the microsecond, however
loaded the host: each cell's verdict is the one the queue's arithmetic gives; and the command line's search."""

from __future__ import annotations

import asyncio
import json
import math
import statistics

import httpx
import pytest

from crosstune.servebench import max_rate
from crosstune.servebench.sweep import SweepConfig, run_sweep
from crosstune.servebench.workload import arrival_times
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.serve import cli, one_line_error
from tests.helpers.virtual_clock import run_on_virtual_clock


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


PREFILL_S, TOKEN_S, LIMIT_MS, REQUESTS, BURSTINESS, SEED, CONTEXT = 0.080, 0.002, 322.0, 16, 1000.0, 0, 16


class OnePrefillSlot:
    """/v1/completions inside the event loop (an httpx transport's handler), on the loop's clock: one prefill slot that
    each prompt holds for PREFILL_S in arrival order, then a token every TOKEN_S, streamed as vLLM streams them."""

    def __init__(self) -> None:
        self.slot_free_at = -math.inf

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        loop = asyncio.get_running_loop()
        body = json.loads(request.content)
        self.slot_free_at = max(loop.time(), self.slot_free_at) + PREFILL_S
        prefilled, prompt, n = self.slot_free_at, len(body["prompt"]), body["max_tokens"]

        async def events():
            await asyncio.sleep(prefilled - loop.time())
            for sent in range(1, n + 1):
                await asyncio.sleep(TOKEN_S)
                usage = {"prompt_tokens": prompt, "completion_tokens": sent, "total_tokens": prompt + sent}
                choice = {"index": 0, "text": "x", "finish_reason": "length" if sent == n else None}
                yield f"data: {json.dumps({'choices': [choice], 'usage': usage})}\n\n".encode()
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=events())


def queue_median_ttft_ms(rate: float) -> float:
    """The median TTFT one prefill slot gives the cell's requests arriving on the sweep's schedule (its seed is the
    sweep's + the context): request k starts prefill at max(its arrival, the previous one's start + PREFILL_S)."""
    free, ttft = -math.inf, []
    for arrival in arrival_times(REQUESTS, rate, BURSTINESS, SEED + CONTEXT):
        free = max(arrival, free) + PREFILL_S
        ttft.append(free + TOKEN_S - arrival)
    return 1000 * statistics.median(ttft)


def known_max_rate() -> float:
    """The rate at which evenly spaced arrivals put the median TTFT at the limit: request k waits k·(PREFILL_S − 1/r)
    on top of PREFILL_S + TOKEN_S; the median of 16 sits at k = 7.5."""
    margin = (LIMIT_MS / 1000 - PREFILL_S - TOKEN_S) / ((REQUESTS - 1) / 2)
    return 1.0 / (PREFILL_S - margin)


def test_find_max_rate_on_a_server_whose_latency_grows_with_load(tmp_path, tiny_gemma4_dir):
    assert known_max_rate() == pytest.approx(20.83, abs=0.01)
    lines: list[str] = []
    with FakeOpenAI() as server:  # the probe and /metrics; the timed requests go to the slot, on the virtual clock
        cfg = SweepConfig(
            endpoint=server.url,
            model="ok",
            tokenizer=tiny_gemma4_dir,
            contexts=[CONTEXT],
            rates=[10.0],
            burstiness=BURSTINESS,
            output_len=2,
            num_requests=REQUESTS,
            warmup=0,
            seed=SEED,
            find_max_rate=True,
            slo_ms={"median_ttft_ms": LIMIT_MS},
        )
        summary = run_on_virtual_clock(
            run_sweep(cfg, tmp_path, lines.append, transport=httpx.MockTransport(OnePrefillSlot()))
        )
    found = summary["max_rate"][str(CONTEXT)]
    lo, hi = found["max_rate"], found["missed_at"]
    rates = [s["rate"] for s in found["steps"]]
    assert [c["request_rate"] for c in summary["cells"]] == rates and len(rates) <= 8 and rates[0] == 10
    for cell, step in zip(summary["cells"], found["steps"], strict=True):
        # the client's TTFT is the queue's: exact but for float64 sums of virtual times (~1e-13 ms)
        assert cell["median_ttft_ms"] == pytest.approx(queue_median_ttft_ms(step["rate"]), abs=1e-6)
        assert cell["completed"] == REQUESTS and step["met"] == (queue_median_ttft_ms(step["rate"]) <= LIMIT_MS)
        assert cell["slo_ms"] == {"median_ttft_ms": LIMIT_MS} and "goodput" in cell
    assert found == max_rate.result([max_rate.Step(s["rate"], s["met"]) for s in found["steps"]], 0.1)
    assert found["converged"] and hi / lo <= 1.1
    assert lo <= known_max_rate() <= hi  # burstiness 1000: arrivals within ~3 % of evenly spaced
    assert f"context 16: {lo:.3g} req/s meets the SLO, {hi:.3g} misses it ({len(rates)} cells)" in lines


def test_find_max_rate_from_the_command_line(tmp_path, tiny_gemma4_dir):
    """--find-max-rate, --rates and --max-rate-steps reach the search: an SLO no request misses (a minute's median
    TTFT) doubles the start rate for as many cells as allowed."""
    with FakeOpenAI() as server:
        args = ["--endpoint", server.url, "--model", "ok", "--tokenizer", str(tiny_gemma4_dir), "--contexts", "16"]
        args += ["--output-len", "2", "--num-requests", "2", "--warmup", "0", "--rates", "10", "--max-rate-steps", "2"]
        result = cli("bench", "serve", *args, "--find-max-rate", "median_ttft_ms=60000", "--out", str(tmp_path / "b"))
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["max_rate"]["16"]["steps"] == [{"rate": 10, "met": True}, {"rate": 20, "met": True}]
    assert "context 16: every rate up to 20 req/s met the SLO; none missed within 2 cells" in result.output


def test_find_max_rate_needs_an_slo_of_its_own(tmp_path, tiny_gemma4_dir):
    base = ["bench", "serve", "--endpoint", "http://127.0.0.1:9", "--model", "ok", "--tokenizer", str(tiny_gemma4_dir)]
    line = one_line_error(cli(*base, "--find-max-rate", "p99_ttft_ms=80", "--slo", "p99_ttft_ms=80"))
    assert "--find-max-rate names the SLO the search meets: give it there, not also as --slo" in line
    line = one_line_error(cli(*base, "--find-max-rate", "ttft=80"))
    assert "--find-max-rate 'ttft=80': unknown SLO name 'ttft'" in line
    line = one_line_error(cli(*base, "--find-max-rate", "p99_ttft_ms=80", "--rates", "1,2"))
    assert "--rates gives the one rate the search starts at, not a list" in line
