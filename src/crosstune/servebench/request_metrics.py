"""A sweep cell's summary from its request records, with `vllm bench serve`'s definitions and names.

duration = first dispatch → end of gather; throughputs divide by it; ITL pools every request's chunk gaps;
percentiles interpolate linearly (numpy's default, as vLLM) — never `sorted(x)[int(0.99 * n)]`.
Goodput (DistServe) = requests meeting the SLO (servebench.slo.request_meets) / duration.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from crosstune.servebench import slo
from crosstune.servebench.client import RequestRecord

STATS = (*slo.STATS, "std")  # per metric: the statistics an SLO may name (servebench.slo), and the spread
PERCENTILES = tuple(int(s[1:]) for s in slo.STATS if s.startswith("p"))  # (90, 99)
NEAR_ZERO_GAP_S = 0.001  # chunk gaps under 1 ms: the server flushed several chunks at once
# A stream is bursty when most of its tokens reached the client in one burst: its client-side TTFT then reads
# ~E2EL and its ITL ~0. A cell with more than BURSTY_CELL_SHARE such streams has client TTFT/ITL/TPOT that
# describe the host's scheduling, not the server: the summary says so and the server's /metrics figures stand.
BURSTY_STREAM = 0.5
BURSTY_CELL_SHARE = 0.1


def stats_ms(values_s: Iterable[float], name: str) -> dict[str, float | None]:
    x = np.asarray(list(values_s), dtype=np.float64) * 1000.0
    if x.size == 0:
        return {f"{s}_{name}_ms": None for s in STATS}
    out = {f"mean_{name}_ms": float(x.mean()), f"median_{name}_ms": float(np.median(x))}
    out[f"std_{name}_ms"] = float(x.std())
    out.update({f"p{p}_{name}_ms": float(np.percentile(x, p)) for p in PERCENTILES})
    return out


def summarize(records: list[RequestRecord], duration_s: float, slo_ms: dict[str, float] | None = None) -> dict:
    """The cell's metrics (vLLM names) plus what tells whether client timings can be trusted."""
    done = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    prompt = sum(r.prompt_tokens or r.expected_prompt_tokens for r in done)
    output = sum(r.completion_tokens or 0 for r in done)
    first = records[0] if records else None
    cell = {
        "context_len": first.context_len if first else None,
        "concurrency": first.concurrency if first else None,
        "request_rate": first.request_rate if first else None,
        "num_requests": len(records),
        "completed": len(done),
        "failed": len(failed),
        "failures": dict(Counter(failure_kind(r.error) for r in failed if r.error)),
        "first_error": next((r.error for r in failed if r.error), None),
        "duration_s": duration_s,
        "total_input_tokens": prompt,
        "total_output_tokens": output,
        "request_throughput": len(done) / duration_s if duration_s > 0 else 0.0,
        "output_throughput": output / duration_s if duration_s > 0 else 0.0,
        "total_token_throughput": (prompt + output) / duration_s if duration_s > 0 else 0.0,
        "output_throughput_per_user": per_user_throughput(done),
    }
    cell.update(stats_ms((r.ttft_s for r in done if r.ttft_s is not None), "ttft"))
    cell.update(stats_ms((t for r in done if (t := r.tpot_s) is not None), "tpot"))
    cell.update(stats_ms((g for r in done for g in r.itl_s), "itl"))
    cell.update(stats_ms((r.e2el_s for r in done if r.e2el_s is not None), "e2el"))
    cell["chunks"] = chunk_shares(done)
    bursty = bursty_share(done)
    cell["bursty_stream_share"] = bursty
    cell["client_timing_reliable"] = bursty is None or bursty <= BURSTY_CELL_SHARE
    if slo_ms:
        good = sum(
            slo.request_meets(r.ok, {"ttft": r.ttft_s, "tpot": r.tpot_s, "e2el": r.e2el_s}, slo_ms) for r in records
        )
        cell["goodput"] = good / duration_s if duration_s > 0 else 0.0
        cell["slo_ms"] = dict(slo_ms)
        cell["slo_misses"] = slo.cell_misses(cell["completed"], cell["failed"], cell, slo_ms)
    return cell


def per_user_throughput(done: list[RequestRecord]) -> float | None:
    """Output tokens per second one user sees: Σ output tokens / Σ E2EL over completed requests — the cell's output
    throughput divided by its mean requests in flight (Little's law), so concurrency and rate cells read alike; at
    a saturated concurrency level it is `vllm bench sweep plot_pareto`'s throughput / concurrency."""
    seconds = sum(r.e2el_s for r in done if r.e2el_s is not None)
    tokens = sum(r.completion_tokens or 0 for r in done if r.e2el_s is not None)
    return tokens / seconds if seconds > 0 else None


def largest_burst_share(r: RequestRecord) -> float | None:
    """The share of a stream's tokens that arrived in its largest burst (chunks less than NEAR_ZERO_GAP_S apart).
    None for a stream of fewer than two tokens, which has no gaps to judge."""
    sizes = r.chunk_tokens if len(r.chunk_tokens) == len(r.itl_s) + 1 else [1] * (len(r.itl_s) + 1)
    total = sum(sizes)
    if total < 2:
        return None
    best = run = sizes[0]
    for gap, n in zip(r.itl_s, sizes[1:], strict=True):
        run = run + n if gap < NEAR_ZERO_GAP_S else n
        best = max(best, run)
    return best / total


def bursty_share(done: list[RequestRecord]) -> float | None:
    """The share of completed streams the client saw mostly in one burst (over BURSTY_STREAM of their tokens)."""
    shares = [s for r in done if (s := largest_burst_share(r)) is not None]
    return sum(s > BURSTY_STREAM for s in shares) / len(shares) if shares else None


def chunk_shares(done: list[RequestRecord]) -> dict[str, float | None]:
    """Shares of content chunks holding several tokens and of near-zero gaps, and of requests delivered in one burst:
    high values mean the server batched its flushes and client-side TTFT/ITL read low (trust /metrics instead)."""
    sizes = [n for r in done for n in r.chunk_tokens]
    gaps = [g for r in done for g in r.itl_s]
    burst = [r for r in done if r.itl_s and max(r.itl_s) < NEAR_ZERO_GAP_S]
    return {
        "chunks": len(sizes) or None,
        "multi_token_chunk_share": (sum(n > 1 for n in sizes) / len(sizes)) if sizes else None,
        "near_zero_gap_share": (sum(g < NEAR_ZERO_GAP_S for g in gaps) / len(gaps)) if gaps else None,
        "single_burst_request_share": (len(burst) / len(done)) if done else None,
    }


def failure_kind(error: str) -> str:
    """A failure's kind, for counting ("HTTP 500", "timeout", "dropped stream", "short completion", ...)."""
    return error.split(":")[0].split(" after")[0]


def load_of(cell: dict) -> float:
    """A cell's load: its request rate in a rate sweep (concurrency is then only a cap), else its concurrency."""
    return cell["request_rate"] if cell.get("request_rate") is not None else cell.get("concurrency") or 0


def describe_load(cell: dict) -> str:
    """'concurrency 4', or 'rate 2 req/s' (with its cap: 'rate 2 req/s, at most 8 in flight')."""
    if cell.get("request_rate") is None:
        return f"concurrency {cell.get('concurrency')}"
    cap = f", at most {cell['concurrency']} in flight" if cell.get("concurrency") else ""
    return f"rate {cell['request_rate']:g} req/s{cap}"


def saturation(cells: list[dict]) -> dict[str, dict]:
    """Per context length: the cell with the highest output throughput (ties: the lower load), named by its load:
    the request rate in a rate sweep, the concurrency otherwise."""
    out: dict[str, dict] = {}
    for ctx in sorted({c["context_len"] for c in cells}):
        rows = [c for c in cells if c["context_len"] == ctx and c["completed"] > 0]
        if not rows:
            continue
        best = max(rows, key=lambda c: (c["output_throughput"], -load_of(c)))
        out[str(ctx)] = {
            "load": describe_load(best),
            "concurrency": best["concurrency"],
            "request_rate": best["request_rate"],
            "output_throughput": best["output_throughput"],
            "p99_ttft_ms": best["p99_ttft_ms"],
            "client_timing_reliable": best.get("client_timing_reliable", True),
        }
    return out
