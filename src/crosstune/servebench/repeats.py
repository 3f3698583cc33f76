"""`bench serve --repeats N`: a cell run N times, each repeat with prompts of its own; the cell's figures pool every
repeat's requests (throughputs over the summed durations, percentiles over all requests), and `intervals` give a
Student-t 95 % confidence interval of the mean over repeats for the headline figures (AIPerf's multi-run intervals:
the repeats are the samples, not the requests, which share a server's state within one run)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95
# The figures a repeat is summarised by, and the ones its interval is given for.
HEADLINE = (
    "request_throughput",
    "output_throughput",
    "output_throughput_per_user",
    "goodput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_e2el_ms",
)


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, df))


def interval(values: Sequence[float]) -> dict[str, float | int | None]:
    """Mean and the Student-t interval of the mean over `values` (one per repeat); no interval from one value."""
    x = np.asarray(values, dtype=np.float64)
    out: dict[str, float | int | None] = {"n": int(x.size), "mean": float(x.mean()), "low": None, "high": None}
    if x.size >= 2:
        half = t_quantile(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
        out["low"], out["high"] = out["mean"] - half, out["mean"] + half
    return out


def headline(cell: dict) -> dict[str, float | None]:
    return {k: cell.get(k) for k in HEADLINE}


def intervals(repeats: Sequence[dict]) -> dict[str, dict]:
    """Per headline figure measured in every repeat: its interval over the repeats."""
    out = {}
    for key in HEADLINE:
        values = [r.get(key) for r in repeats]
        if values and all(v is not None for v in values):
            out[key] = {**interval(values), "confidence": CONFIDENCE}
    return out
