"""vLLM's own `/metrics` (Prometheus) before and after a cell: histogram and counter deltas, so the server's view of
TTFT / ITL / E2E sits next to the client's (on a loaded host the client's TTFT/ITL can read ~E2EL / ~0).
Means are exact (the histograms' sum / count); percentiles are bucket-bounded estimates and carry their bucket."""

from __future__ import annotations

import math

import httpx
from prometheus_client.parser import text_string_to_metric_families

from crosstune.servebench import speculation

HISTOGRAMS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "e2el": "vllm:e2e_request_latency_seconds",
}
COUNTERS = {
    "generation_tokens": "vllm:generation_tokens",
    "prompt_tokens": "vllm:prompt_tokens",
    "preemptions": "vllm:num_preemptions",
    "requests_succeeded": "vllm:request_success",
    # prompt tokens looked up in / found in the prefix cache (vLLM v1 token counters): servebench.prompt_cache
    "prefix_cache_queries": "vllm:prefix_cache_queries",
    "prefix_cache_hits": "vllm:prefix_cache_hits",
    **speculation.COUNTERS,  # registered only when the server drafts (servebench.speculation)
}


def scrape(base_url: str, timeout: float = 10.0) -> dict[str, float] | None:
    """Flat samples {name|le: value} summed over label sets other than `le` (and a draft `position`, kept as
    name#k); None when unreachable."""
    try:
        r = httpx.get(base_url.rstrip("/") + "/metrics", timeout=timeout)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    return parse(r.text)


def parse(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + (f"|{s.labels['le']}" if "le" in s.labels else "")
            key += f"#{s.labels['position']}" if "position" in s.labels else ""
            out[key] = out.get(key, 0.0) + float(s.value)
    return out


def _bucket_quantile(buckets: list[tuple[float, float]], q: float) -> tuple[float, float, float] | None:
    """Prometheus' histogram_quantile: linear within the bucket holding rank q·count. Returns (estimate, the
    bucket's lower and upper edge): the true quantile is somewhere in that bucket, the estimate is no measurement.
    The upper edge is inf for the +Inf bucket (the estimate is then its lower edge, as Prometheus gives)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return prev_le, prev_le, le
            width = count - prev_count
            return prev_le + (le - prev_le) * ((rank - prev_count) / width if width else 0.0), prev_le, le
        prev_le, prev_count = le, count
    return prev_le, prev_le, math.inf


BUCKET_NOTE = (
    "server percentiles are interpolated within vLLM's /metrics histogram buckets: the true value lies in the "
    "bucket given by *_bucket_ms ([lower, upper] edges), not at the estimate; means are exact (sum / count)"
)


def delta(before: dict[str, float] | None, after: dict[str, float] | None) -> dict | None:
    """The server's view of the requests between two scrapes: mean (exact: sum / count), median and p99 (bucket
    estimates, with their buckets' edges) in ms per histogram, and counter deltas."""
    return deltas([(before, after)])


def deltas(pairs: list[tuple[dict[str, float] | None, dict[str, float] | None]]) -> dict | None:
    """`delta` over several (before, after) windows together (a cell's repeats, each after its own warm-up): the
    histograms' and counters' differences are summed, then read as one; None when a scrape is missing."""
    if not pairs or any(before is None or after is None for before, after in pairs):
        return None
    diff: dict[str, float] = {}
    for before, after in pairs:
        for key, value in after.items():
            diff[key] = diff.get(key, 0.0) + value - before.get(key, 0.0)
    out: dict = {"note": BUCKET_NOTE}
    for short, name in HISTOGRAMS.items():
        n = diff.get(f"{name}_count", 0.0)
        total = diff.get(f"{name}_sum", 0.0)
        les = sorted((float(k.split("|")[1]), k) for k in diff if k.startswith(f"{name}_bucket|"))
        buckets = [(le, diff[k]) for le, k in les]
        out[f"count_{short}"] = n
        out[f"mean_{short}_ms"] = total / n * 1000.0 if n > 0 else None
        for label, q in (("median", 0.5), ("p99", 0.99)):
            found = _bucket_quantile(buckets, q) if n > 0 else None
            out[f"{label}_{short}_ms"] = None if found is None else found[0] * 1000.0
            out[f"{label}_{short}_bucket_ms"] = None if found is None else [_ms(found[1]), _ms(found[2])]
    for short, name in COUNTERS.items():
        key = f"{name}_total"
        out[short] = diff[key] if key in diff else None
    out["spec_accepted_per_position"] = speculation.per_position(diff)
    return out


def _ms(seconds: float) -> float | None:
    return None if math.isinf(seconds) else seconds * 1000.0
