"""`bench serve --find-max-rate SLO`: the highest request rate whose cell meets the SLO (servebench.slo's judge),
searched in bounded steps, each a real cell (AIPerf's adaptive search, in its plainest form).

From the start rate it doubles while cells meet the SLO (halves while they miss) until one rate meets and a higher
one misses; then it bisects that bracket geometrically (rates span decades) until missed / met <= 1 + resolution or
the steps run out. The answer is the highest rate that met with no lower rate missing above it; a server whose
verdicts are not monotonic in the rate (noise) leaves the bracket it last saw, and `converged` says whether it is
as narrow as asked."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_START = 1.0  # req/s, when --rates gives no start


@dataclass(frozen=True)
class Step:
    rate: float
    met: bool


def bracket(steps: Sequence[Step]) -> tuple[float | None, float | None]:
    """(the highest rate that met below the lowest miss, the lowest rate that missed); None where there is none."""
    missed = [s.rate for s in steps if not s.met]
    hi = min(missed) if missed else None
    met = [s.rate for s in steps if s.met and (hi is None or s.rate < hi)]
    return (max(met) if met else None), hi


def next_rate(steps: Sequence[Step], start: float, resolution: float, max_steps: int) -> float | None:
    """The rate of the next cell, or None when the search is done (bracket narrow enough, or no steps left)."""
    if not steps:
        return start
    if len(steps) >= max_steps:
        return None
    lo, hi = bracket(steps)
    if hi is None:
        return 2.0 * lo
    if lo is None:
        return hi / 2.0
    if hi / lo <= 1.0 + resolution:
        return None
    return math.sqrt(lo * hi)


def result(steps: Sequence[Step], resolution: float) -> dict:
    """What the summary records of one context's search."""
    lo, hi = bracket(steps)
    return {
        "max_rate": lo,
        "missed_at": hi,
        "converged": lo is not None and hi is not None and hi / lo <= 1.0 + resolution,
        "resolution": resolution,
        "steps": [{"rate": s.rate, "met": s.met} for s in steps],
    }


def describe(context: str, found: dict) -> str:
    """One line: 'context 512: 27.4 req/s meets the SLO, 29.8 misses it (7 cells)'."""
    n = len(found["steps"])
    lo, hi = found["max_rate"], found["missed_at"]
    if lo is None:
        return f"context {context}: no rate down to {hi:.3g} req/s meets the SLO ({n} cells)"
    if hi is None:
        return f"context {context}: every rate up to {lo:.3g} req/s met the SLO; none missed within {n} cells"
    rough = "" if found["converged"] else f", not narrowed to {found['resolution']:.0%} within the steps"
    return f"context {context}: {lo:.3g} req/s meets the SLO, {hi:.3g} misses it ({n} cells{rough})"
