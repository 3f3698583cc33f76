"""Latency SLOs: the one declaration of their names, the one parser and the one judge, for `bench serve --slo`,
`cost serve --slo`, `report --slo`, a workload file's `slo:` and the demo's and study's sweeps.

Spelling: `<stat>_<metric>_ms=MS`, e.g. `p99_ttft_ms=2000` — the names of a bench summary's own fields (stat: mean,
median, p90, p99; metric: ttft, tpot, itl, e2el).

The rule, decided once (docs/COST_AND_REPORT.md, "The SLO, judged once"):
- A cell meets the SLO when it completed a request, no request failed, and each named statistic is measured and
  ≤ its limit. A failed request misses every SLO: percentiles are taken over completed requests only, so a cell
  whose slow requests timed out would otherwise look fast.
- A request meets it (goodput, DistServe / `vllm bench serve --goodput`) when it completed and its own TTFT, TPOT
  and E2EL are each ≤ the tightest limit named for that metric. A metric the request has no value for (TPOT with
  one output token) is not held against it: it is judged on what it has. ITL has no per-request value and counts
  for the cell only.
- Values are compared as measured, never rounded; rounding happens only in the text that explains a miss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from crosstune.errors import CrosstuneError

STATS = ("mean", "median", "p90", "p99")
METRICS = ("ttft", "tpot", "itl", "e2el")
NAMES = tuple(f"{s}_{m}_ms" for m in METRICS for s in STATS)
PER_REQUEST = ("ttft", "tpot", "e2el")  # a request's own value exists (goodput); ITL is a list of gaps
EXAMPLE = "p99_ttft_ms=2000"
HELP = f"NAME=MILLISECONDS with NAME <stat>_<metric>_ms, e.g. {EXAMPLE}"


class SloError(CrosstuneError):
    """An SLO that is misspelt, not a positive finite number of milliseconds, or given twice."""


def check_name(name: str, where: str = "--slo") -> str:
    if name not in NAMES:
        hint = f" (write p99_{name}_ms=… for the p99)" if name in METRICS else ""
        raise SloError(
            f"{where}: unknown SLO name {name!r}{hint}: use <stat>_<metric>_ms with stat in {', '.join(STATS)} and "
            f"metric in {', '.join(METRICS)}, e.g. {EXAMPLE}"
        )
    return name


def check_limit(value: object, where: str = "--slo") -> float:
    """A limit in milliseconds: a number (not a boolean, not text), finite and > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SloError(f"{where}: {value!r} is not a number of milliseconds")
    if not math.isfinite(value) or value <= 0:
        raise SloError(f"{where}: an SLO must be a positive, finite number of milliseconds")
    return float(value)


def check_slo(limits: Mapping[str, object], where: str = "--slo") -> dict[str, float]:
    """{name: ms} as given in a workload file or a SweepConfig, checked: SloError naming `where` and the name."""
    if not isinstance(limits, Mapping):
        raise SloError(f"{where}: expected a mapping such as {{p99_ttft_ms: 2000}}")
    return {check_name(str(k), where): check_limit(v, f"{where} {k}={v!r}") for k, v in limits.items()}


def parse_slo(items: list[str] | None, option: str = "--slo") -> dict[str, float]:
    """['p99_ttft_ms=2000', ...] -> {'p99_ttft_ms': 2000.0}; SloError naming the item otherwise."""
    out: dict[str, float] = {}
    for item in items or []:
        name, sep, text = (part.strip() for part in item.partition("="))
        where = f"{option} {item!r}"
        if not sep or not name:
            raise SloError(f"{where}: expected {HELP}")
        check_name(name, where)
        try:
            value = float(text)
        except ValueError:
            raise SloError(f"{where}: {text!r} is not a number of milliseconds") from None
        check_limit(value, where)
        if name in out:
            raise SloError(f"{option}: {name} given twice ({out[name]:g} and {value:g})")
        out[name] = value
    return out


def metric_of(name: str) -> str:
    """'p99_ttft_ms' -> 'ttft'."""
    return name.split("_")[1]


def describe(slo: Mapping[str, float]) -> str:
    """'p99_ttft_ms <= 2,000, median_tpot_ms <= 50': the limits as every table prints them."""
    return ", ".join(f"{name} <= {_ms(limit)}" for name, limit in slo.items())


def cell_misses(completed: int, failed: int, stats: Mapping[str, float | None], slo: Mapping[str, float]) -> list[str]:
    """Why a cell misses the SLO (empty: it meets it). `stats` holds the cell's statistics by their SLO names (a
    summary cell itself, or compare's Cell.latency_ms); each is compared unrounded, a value equal to its limit meets
    it."""
    misses = [f"{failed} failed request(s)"] if failed else []
    if not completed:
        misses.append("no completed request")
    for name, limit in slo.items():
        value = stats.get(name)
        if value is None:
            misses.append(f"{name} not measured")
        elif value > limit:
            misses.append(f"{name} {_exceeding(value, limit)} > {_ms(limit)}")
    return misses


def per_request_limits(slo: Mapping[str, float]) -> dict[str, float]:
    """The tightest limit per per-request metric: what a request must meet to count for goodput."""
    limits: dict[str, float] = {}
    for name, value in slo.items():
        metric = metric_of(name)
        if metric in PER_REQUEST:
            limits[metric] = min(value, limits.get(metric, math.inf))
    return limits


def request_meets(ok: bool, values_s: Mapping[str, float | None], slo: Mapping[str, float]) -> bool:
    """A request within the SLO (goodput): completed (`ok`), and each per-request metric it has (`values_s`: ttft,
    tpot, e2el in seconds; None where it has none) ≤ its tightest limit."""
    if not ok:
        return False
    for metric, limit in per_request_limits(slo).items():
        value = values_s.get(metric)
        if value is not None and value * 1000.0 > limit:
            return False
    return True


def _ms(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,}"


def _exceeding(value: float, limit: float) -> str:
    """`value` with as few decimals (at least one) as show it above `limit`: 2,000.0001, never 2,000.0 > 2,000."""
    for digits in range(1, 7):
        text = f"{value:,.{digits}f}"
        if float(text.replace(",", "")) > limit:
            return text
    return f"{value:,}"
