"""Latency SLOs, spelled one way everywhere: `<stat>_<metric>_ms=MS`, e.g. `p99_ttft_ms=2000`, the names of the
summary's own fields (stat: mean, median, p90, p99; metric: ttft, tpot, itl, e2el), in `bench serve --slo` as in
`cost serve --slo` and `report --slo`.

Two uses of the same limits: a cell meets the SLO when each named statistic is within its limit (what cost and
report price); goodput (DistServe, `vllm bench serve --goodput`) counts the requests whose own TTFT, TPOT and E2EL
are within every limit named for that metric (ITL has no per-request value and counts for the cell only).
"""

from __future__ import annotations

import math

from crosstune.errors import CrosstuneError

STATS = ("mean", "median", "p90", "p99")
METRICS = ("ttft", "tpot", "itl", "e2el")
NAMES = tuple(f"{s}_{m}_ms" for m in METRICS for s in STATS)
PER_REQUEST = ("ttft", "tpot", "e2el")  # a request's own value exists (goodput); ITL is a list of gaps
EXAMPLE = "p99_ttft_ms=2000"


class SloError(CrosstuneError):
    """An SLO that is misspelt, not a positive finite number of milliseconds, or given twice."""


def parse_slo(items: list[str] | None, option: str = "--slo") -> dict[str, float]:
    """['p99_ttft_ms=2000', ...] -> {'p99_ttft_ms': 2000.0}; SloError naming the item otherwise."""
    out: dict[str, float] = {}
    for item in items or []:
        name, sep, text = (part.strip() for part in item.partition("="))
        if not sep or not name:
            raise SloError(f"{option} {item!r}: expected NAME=MILLISECONDS, e.g. {EXAMPLE}")
        if name not in NAMES:
            hint = f" (write p99_{name}_ms=… for the p99)" if name in METRICS else ""
            raise SloError(
                f"{option} {item!r}: unknown SLO name {name!r}{hint}: use <stat>_<metric>_ms with stat in "
                f"{', '.join(STATS)} and metric in {', '.join(METRICS)}, e.g. {EXAMPLE}"
            )
        try:
            value = float(text)
        except ValueError:
            raise SloError(f"{option} {item!r}: {text!r} is not a number of milliseconds") from None
        if not math.isfinite(value) or value <= 0:
            raise SloError(f"{option} {item!r}: an SLO must be a positive, finite number of milliseconds")
        if name in out:
            raise SloError(f"{option}: {name} given twice ({out[name]:g} and {value:g})")
        out[name] = value
    return out


def metric_of(name: str) -> str:
    """'p99_ttft_ms' -> 'ttft'."""
    return name.split("_")[1]


def per_request_limits(slo: dict[str, float]) -> dict[str, float]:
    """The tightest limit per per-request metric: what a request must meet to count for goodput."""
    limits: dict[str, float] = {}
    for name, value in slo.items():
        metric = metric_of(name)
        if metric in PER_REQUEST:
            limits[metric] = min(value, limits.get(metric, math.inf))
    return limits


def cell_misses(cell: dict, slo: dict[str, float]) -> list[str]:
    """Why a summary cell misses the SLO (empty: it meets it); a cell without a completed request misses it."""
    misses = [] if cell.get("completed") else ["no completed request"]
    for name, limit in slo.items():
        value = cell.get(name)
        if value is None:
            misses.append(f"{name} not measured")
        elif value > limit:
            misses.append(f"{name} {value:,.1f} > {limit:,.1f}")
    return misses
