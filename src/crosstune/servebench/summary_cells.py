"""Reads a serving sweep summary (`crosstune bench serve`'s summary JSON) and picks the operating point per context.

Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.servebench.summary_cells"."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo

from crosstune.bounds import number, whole
from crosstune.errors import InputError
from crosstune.servebench import prompt_cache, speculation
from crosstune.servebench import slo as slos

REQUIRED = ("context_len", "completed", "output_throughput")  # + concurrency, or request_rate for a rate sweep
KNEE_FRACTION = 0.95


def _figure(check: Callable[[str, object], object]) -> BeforeValidator:
    """A figure checked by crosstune.bounds as it enters the model; the refusal names the file, the cell and the key
    (the validation context's `where`), or the key alone without one."""

    def validate(value: object, info: ValidationInfo) -> object:
        where = (info.context or {}).get("where")
        return check(f"{where}.{info.field_name}" if where else str(info.field_name), value)

    return BeforeValidator(validate)


def _optional(check: Callable[[str, object], object]) -> BeforeValidator:
    return _figure(lambda where, value: None if value is None else check(where, value))


def _rate(where: str, value: object) -> float:
    return number(where, value, low=0)


def _latencies(where: str, value: object) -> dict[str, float]:
    return {name: number(f"{where.rsplit('.', 1)[0]}.{name}", v, low=0, unit="ms") for name, v in dict(value).items()}


class Cell(BaseModel):
    """One (context, load) cell of a sweep, its figures checked as they enter (read_sweep)."""

    model_config = ConfigDict(frozen=True)

    context_len: Annotated[int, _figure(lambda w, v: whole(w, v, low=1, unit="prompt tokens"))]
    concurrency: int | float  # the load: concurrent requests, or requests/s for a rate sweep (concurrency null)
    completed: Annotated[int, _figure(whole)]
    failed: Annotated[int, _figure(whole)] = 0
    duration_s: Annotated[float | None, _optional(_rate)] = None
    request_throughput: Annotated[float | None, _optional(_rate)] = None
    output_throughput: Annotated[float, _figure(lambda w, v: number(w, v, low=0, unit="tokens/s"))]
    total_token_throughput: Annotated[float | None, _optional(_rate)] = None
    latency_ms: Annotated[dict[str, float], _figure(_latencies)] = Field(default_factory=dict)  # "p99_ttft_ms" -> ms
    output_throughput_per_user: Annotated[float | None, _optional(_rate)] = None  # tokens/s one user sees (pareto)
    # speculative decoding (servebench.speculation): accepted / proposed draft tokens, 1 + accepted / drafts
    acceptance_rate: Annotated[float | None, _optional(_rate)] = None
    mean_accepted_length: Annotated[float | None, _optional(_rate)] = None

    def latency(self, name: str) -> float | None:
        return self.latency_ms.get(name)

    def slo_misses(self, slo: dict[str, float]) -> list[str]:
        """Why the cell misses `slo` (empty: it meets it), by servebench.slo's one judge."""
        return slos.cell_misses(self.completed, self.failed, self.latency_ms, slo)


@dataclass(frozen=True)
class Sweep:
    path: Path
    label: str
    target: str | None
    cells: list[Cell]
    # What the summary declares about the workload and the server (None: not recorded), compared across sweeps by
    # crosstune.report.comparability: model, api, output_len, tokenizer, kv_cache_dtype, load ("concurrency" or
    # "request rate"), and `source`: the training run the served weights came from (an export's manifest source).
    declared: dict[str, object] = field(default_factory=dict)
    source: dict | None = None

    @property
    def contexts(self) -> list[int]:
        return sorted({c.context_len for c in self.cells})

    def at(self, context_len: int) -> list[Cell]:
        return sorted((c for c in self.cells if c.context_len == context_len), key=lambda c: c.concurrency)


def read_sweep(path: Path) -> Sweep:
    """Parse a sweep summary; a missing field, a value of the wrong type, a non-finite or negative figure, or a file of
    another kind gets an error naming file, cell and key."""
    from crosstune.servebench.summary import load_summary, summary_file  # the one reader of bench summaries

    path = summary_file(path)
    try:
        raw = load_summary(path)
    except ValueError as e:
        raise InputError(str(e)) from None
    rows = raw["cells"]
    if not rows:
        raise InputError(f"{path}: the `cells` list is empty: the sweep recorded nothing")
    cells = [_cell(path, i, row) for i, row in enumerate(rows)]
    for key in ("label", "target", "model", "api", "tokenizer", "tokenizer_hash", "kv_cache_dtype"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise InputError(f"{path}: {key} is {raw[key]!r}, not text")
    if raw.get("source") is not None and not isinstance(raw["source"], dict):
        raise InputError(f"{path}: source is {raw['source']!r}, not a mapping (an export manifest's `source`)")
    label = raw.get("label") or raw.get("target") or path.parent.name or path.stem
    return Sweep(path, str(label), raw.get("target"), cells, _declared(path, raw, rows), raw.get("source"))


def _declared(path: Path, raw: dict, rows: list[dict]) -> dict[str, object]:
    """What the summary says about its workload and server, by the labels comparability reports them under."""
    lens = [
        whole(f"{path}: output_len", n, low=1, unit="tokens per request")
        for n in [raw.get("output_len")] + [row.get("output_len") for row in rows]
        if n is not None
    ]
    output_len: object = None
    if lens:
        output_len = lens[0] if len(set(lens)) == 1 else "varies: " + ", ".join(map(str, sorted(set(lens))))
    rates = any(row.get("concurrency") is None for row in rows)
    return {
        "model": raw.get("model"),
        "api": raw.get("api"),
        "output length (tokens)": output_len,
        "tokenizer": raw.get("tokenizer_hash") or raw.get("tokenizer"),
        "KV-cache dtype": raw.get("kv_cache_dtype"),
        "hardware": raw.get("target"),
        "load": "request rate (req/s)" if rates else "concurrent requests",
        # cold, a prefix reuse ratio, or a cold workload the cache served (servebench.prompt_cache)
        "prompt cache": prompt_cache.sweep_kind(raw) if "prompt_cache" in raw else None,
        # a drafter or none (servebench.speculation): a subject of the comparison (servebench.sweep_comparison)
        "speculative decoding": speculation.sweep_kind(raw),
    }


def _cell(path: Path, index: int, row: object) -> Cell:
    where = f"{path}: cells[{index}]"
    if not isinstance(row, dict):
        raise InputError(f"{where}: not a mapping")
    missing = [k for k in REQUIRED if row.get(k) is None]
    rate = row.get("concurrency") is None
    load = row.get("request_rate") if rate else row.get("concurrency")
    if load is None:
        missing.append("concurrency (or request_rate)")
    if missing:
        raise InputError(f"{where} lacks {', '.join(missing)}")
    spec = row.get("speculation") or {}
    if not isinstance(spec, dict):
        raise InputError(f"{where}.speculation: {spec!r} is not a mapping (servebench.speculation's figures)")
    load_where = f"{where}.{'request_rate' if rate else 'concurrency'}"
    figures = {
        **{
            k: row.get(k)
            for k in (
                "context_len",
                "completed",
                "output_throughput",
                "duration_s",
                "request_throughput",
                "total_token_throughput",
                "output_throughput_per_user",
            )
        },
        "failed": row.get("failed") or 0,
        "latency_ms": {name: row[name] for name in slos.NAMES if row.get(name) is not None},
        "concurrency": (
            number(load_where, load, low=0, low_open=True, unit="requests/s")
            if rate
            else whole(load_where, load, low=1, unit="requests in flight")
        ),
        **{k: spec.get(k) for k in ("acceptance_rate", "mean_accepted_length")},
    }
    return Cell.model_validate(figures, context={"where": where})


def saturation_point(sweep: Sweep, context_len: int) -> Cell:
    """The cell with the highest output throughput at this context (ties: the lower concurrency)."""
    cells = [c for c in sweep.at(context_len) if c.completed > 0 and c.output_throughput > 0]
    if not cells:
        raise InputError(f"{sweep.path}: no cell at context {context_len} completed a request")
    return max(cells, key=lambda c: (c.output_throughput, -c.concurrency))


def knee(sweep: Sweep, context_len: int) -> Cell:
    """The lowest concurrency reaching KNEE_FRACTION of the saturation throughput: where adding load stops paying."""
    peak = saturation_point(sweep, context_len).output_throughput
    return next(c for c in sweep.at(context_len) if c.completed > 0 and c.output_throughput >= KNEE_FRACTION * peak)


def slo_point(sweep: Sweep, context_len: int, slo: dict[str, float]) -> Cell:
    """The highest-concurrency cell meeting every SLO limit; InputError (with the closest misses) if none does."""
    slo = slos.check_slo(slo)
    cells = sweep.at(context_len)
    ok = [c for c in cells if not c.slo_misses(slo)]
    if not ok:
        why = "; ".join(f"concurrency {c.concurrency}: {', '.join(c.slo_misses(slo))}" for c in cells)
        raise InputError(f"{sweep.path}: no load at context {context_len} meets the SLO ({slos.describe(slo)}) — {why}")
    return max(ok, key=lambda c: c.concurrency)
