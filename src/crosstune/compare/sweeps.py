"""Reads a serving sweep summary (`crosstune bench serve`'s summary JSON) and picks the operating point per context.

Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.compare.sweeps"."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from crosstune.compare.prices import CostError

METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "p90", "p99")
REQUIRED = ("context_len", "completed", "output_throughput")  # + concurrency, or request_rate for a rate sweep
LATENCY_NAMES = tuple(f"{s}_{m}_ms" for m in METRICS for s in STATS)
KNEE_FRACTION = 0.95


@dataclass(frozen=True)
class Cell:
    context_len: int
    concurrency: float  # the load: concurrent requests, or requests/s for a rate sweep (concurrency null)
    completed: int
    failed: int
    duration_s: float | None
    request_throughput: float | None
    output_throughput: float
    total_token_throughput: float | None
    latency_ms: dict[str, float] = field(default_factory=dict)  # "p99_ttft_ms" -> value

    def latency(self, name: str) -> float | None:
        return self.latency_ms.get(name)


@dataclass(frozen=True)
class Sweep:
    path: Path
    label: str
    target: str | None
    cells: list[Cell]

    @property
    def contexts(self) -> list[int]:
        return sorted({c.context_len for c in self.cells})

    def at(self, context_len: int) -> list[Cell]:
        return sorted((c for c in self.cells if c.context_len == context_len), key=lambda c: c.concurrency)


def read_sweep(path: Path) -> Sweep:
    """Parse a sweep summary; a missing field or a file of another kind gets an error naming file, cell and key."""
    from crosstune.serve.report import load_summary  # the one reader of `crosstune bench serve` summaries

    path = Path(path)
    path = path / "summary.json" if path.is_dir() else path
    try:
        raw = load_summary(path)
    except ValueError as e:
        raise CostError(str(e)) from None
    rows = raw["cells"]
    if not rows:
        raise CostError(f"{path}: the `cells` list is empty: the sweep recorded nothing")
    cells = [_cell(path, i, row) for i, row in enumerate(rows)]
    label = raw.get("label") or raw.get("target") or path.parent.name or path.stem
    return Sweep(path, str(label), raw.get("target"), cells)


def _cell(path: Path, index: int, row: dict) -> Cell:
    row = {**row}
    row.setdefault("context_len", row.get("input_len"))
    row.setdefault("duration_s", row.get("duration"))
    missing = [k for k in REQUIRED if row.get(k) is None]
    load = row.get("concurrency") if row.get("concurrency") is not None else row.get("request_rate")
    if load is None:
        missing.append("concurrency (or request_rate)")
    if missing:
        raise CostError(f"{path}: cells[{index}] lacks {', '.join(missing)}")
    latency = {name: float(row[name]) for name in LATENCY_NAMES if row.get(name) is not None}
    optional = {
        k: (None if row.get(k) is None else float(row[k]))
        for k in ("duration_s", "request_throughput", "total_token_throughput")
    }
    return Cell(
        context_len=int(row["context_len"]),
        concurrency=int(load) if row.get("concurrency") is not None else float(load),
        completed=int(row["completed"]),
        failed=int(row.get("failed") or 0),
        output_throughput=float(row["output_throughput"]),
        latency_ms=latency,
        **optional,
    )


def saturation_point(sweep: Sweep, context_len: int) -> Cell:
    """The cell with the highest output throughput at this context (ties: the lower concurrency)."""
    cells = [c for c in sweep.at(context_len) if c.completed > 0 and c.output_throughput > 0]
    if not cells:
        raise CostError(f"{sweep.path}: no cell at context {context_len} completed a request")
    return max(cells, key=lambda c: (c.output_throughput, -c.concurrency))


def knee(sweep: Sweep, context_len: int) -> Cell:
    """The lowest concurrency reaching KNEE_FRACTION of the saturation throughput: where adding load stops paying."""
    peak = saturation_point(sweep, context_len).output_throughput
    return next(c for c in sweep.at(context_len) if c.completed > 0 and c.output_throughput >= KNEE_FRACTION * peak)


def meets(cell: Cell, slo: dict[str, float]) -> list[str]:
    """Why `cell` misses the SLO (empty: it meets it). A failed request misses every SLO."""
    misses = [f"{cell.failed} failed request(s)"] if cell.failed else []
    if cell.completed == 0:
        misses.append("no completed request")
    for name, limit in slo.items():
        value = cell.latency(name)
        if value is None:
            misses.append(f"{name} not measured")
        elif value > limit:
            misses.append(f"{name} {value:,.0f} > {limit:,.0f}")
    return misses


def slo_point(sweep: Sweep, context_len: int, slo: dict[str, float]) -> Cell:
    """The highest-concurrency cell meeting every SLO limit; CostError (with the closest misses) if none does."""
    bad = [f"{k!r}" for k in slo if k not in LATENCY_NAMES]
    if bad:
        raise CostError(
            f"unknown SLO metric(s) {', '.join(bad)}: use <stat>_<metric>_ms with stat in {STATS} and "
            f"metric in {METRICS}, e.g. p99_ttft_ms"
        )
    cells = sweep.at(context_len)
    ok = [c for c in cells if not meets(c, slo)]
    if not ok:
        why = "; ".join(f"concurrency {c.concurrency}: {', '.join(meets(c, slo))}" for c in cells)
        limits = ", ".join(f"{k} <= {v:,.0f}" for k, v in slo.items())
        raise CostError(f"{sweep.path}: no load at context {context_len} meets the SLO ({limits}) — {why}")
    return max(ok, key=lambda c: c.concurrency)


def parse_slo(items: list[str] | None) -> dict[str, float]:
    """['p99_ttft_ms=2000', ...] -> {'p99_ttft_ms': 2000.0}."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise CostError(f"--slo {item!r}: expected NAME=MILLISECONDS, e.g. p99_ttft_ms=2000")
    return out
