"""A sweep summary as the console table `bench serve`, a study's bench stage and the demo print: one row per cell,
its SLO verdict given by servebench.slo's judge from the cell's own figures."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from crosstune.servebench import max_rate, prompt_cache, speculation
from crosstune.servebench import slo as slos
from crosstune.servebench.request_metrics import describe_load

BURSTY_MARK = "*"
BURSTY_NOTE = (  # after BURSTY_MARK, below the tables that mark a bursty cell's client timings
    "the client received most streams of this cell in one burst: its TTFT/TPOT/ITL (and an SLO on them) describe the "
    "host's scheduling, not the server; use the server's /metrics figures (summary.json cells[].server)"
)
INTERVALS = (("output_throughput", ",.1f"), ("goodput", ",.2f"), ("p99_ttft_ms", ",.1f"))


def _f(x, spec=",.1f") -> str:
    return "–" if x is None else format(x, spec)


def _bucket(server: dict, key: str) -> str:
    """A /metrics percentile as the bucket it lies in ('100–250'), the estimate being no measurement."""
    edges = server.get(f"{key}_bucket_ms")
    if not edges:
        return _f(server.get(f"{key}_ms"))
    lo, hi = edges
    return f"{_f(lo, ',.0f')}–{'∞' if hi is None else _f(hi, ',.0f')}"


def verdict(cell: dict, slo: dict[str, float]) -> str:
    """'met', or 'missed: <why>' (servebench.slo.cell_misses on the cell's unrounded figures)."""
    misses = slos.cell_misses(cell["completed"], cell["failed"], cell, slo)
    return "missed: " + ", ".join(misses) if misses else "met"


def _cache(cell: dict) -> str:
    """'0 %' of the prompt tokens queried, with a flag mark when a cold cell hit the cache; '–' when not counted."""
    found = cell.get("prefix_cache") or {}
    if found.get("hit_rate") is None:
        return "–" if not found.get("queries") else "0 %"
    return f"{found['hit_rate']:.0%}" + (" !" if found.get("flag") else "")


def _interval(cell: dict, key: str, spec: str) -> str | None:
    found = (cell.get("intervals") or {}).get(key)
    if not found or found["low"] is None:
        return None
    return f"{format(found['mean'], spec)} [{format(found['low'], spec)}, {format(found['high'], spec)}]"


def render_summary(summary: dict, out: Console | None = None) -> None:
    """The sweep as a table; client TTFT/TPOT of cells the client saw mostly in bursts are marked, and server
    percentiles are shown as their /metrics buckets."""
    out = out or Console(soft_wrap=True)
    t = Table(title=f"{summary['model']} @ {summary['endpoint']} ({summary['api']}, {summary['output_len']} out)")
    columns = ("ctx", "load", "ok/fail", "req/s", "out tok/s", "TTFT p50/p99 ms", "TPOT p50 ms", "E2EL p99 ms")
    slo = summary.get("slo_ms") or {}
    extra = ("goodput req/s", "SLO") if slo else ()
    for col in (*columns, "server TTFT p50 ms (bucket)", "prefix-cache hits", "bursty streams", "load avg", *extra):
        t.add_column(col, justify="right")
    bursty_cells = 0
    for c in summary["cells"]:
        level = c["concurrency"] if c["request_rate"] is None else f"{c['request_rate']:g}/s"
        server = c.get("server") or {}
        mark = "" if c.get("client_timing_reliable", True) else BURSTY_MARK
        bursty_cells += bool(mark)
        t.add_row(
            str(c["context_len"]),
            str(level),
            f"{c['completed']}/{c['failed']}",
            _f(c["request_throughput"], ".2f"),
            _f(c["output_throughput"]),
            f"{_f(c['median_ttft_ms'])}/{_f(c['p99_ttft_ms'])}{mark}",
            f"{_f(c['median_tpot_ms'])}{mark}",
            _f(c["p99_e2el_ms"]),
            _bucket(server, "median_ttft"),
            _cache(c),
            _f(c.get("bursty_stream_share"), ".0%"),
            _f(c["load_avg_1m"][1], ".1f"),
            *((_f(c.get("goodput"), ".2f"), verdict(c, slo) + mark) if slo else ()),
        )
    out.print(t)
    if slo:
        out.print(
            f"SLO {slos.describe(slo)}: a cell meets it when no request failed and each statistic does; goodput in "
            "summary.json",
            highlight=False,
        )
    if bursty_cells:
        out.print(f"{BURSTY_MARK} {BURSTY_NOTE}", highlight=False)
    if any(c.get("server") for c in summary["cells"]):
        out.print("server percentiles come from /metrics histograms: the true value lies in the bucket shown")
    seed = "given (--seed)" if summary.get("seed_given") else "fresh"
    if "seed" in summary:
        out.print(
            f"prompts: {summary.get('prompt_cache') or 'cold'} workload, seed {summary['seed']} ({seed})",
            highlight=False,
        )
    for c in prompt_cache.flagged_cells(summary):
        where = f"context {c['context_len']}, {describe_load(c)}"
        out.print(f"! {where}: {c['prefix_cache']['flag']}", highlight=False)
    for c in summary["cells"]:  # speculative decoding: the engine's own acceptance counters (servebench.speculation)
        if text := speculation.line(c):
            out.print(f"context {c['context_len']}, {describe_load(c)}: {text}", highlight=False)
    for c in summary["cells"]:
        spans = [(k, t) for k, spec in INTERVALS if (t := _interval(c, k, spec))]
        if spans:
            where = f"context {c['context_len']}, {describe_load(c)}"
            text = "; ".join(f"{k} {t}" for k, t in spans)
            out.print(f"{where}, mean [95 % interval] over {summary['repeats']} repeats: {text}", highlight=False)
    for ctx, found in (summary.get("max_rate") or {}).items():
        out.print(max_rate.describe(ctx, found), highlight=False)
    for ctx, s in summary["saturation"].items():
        load = s.get("load") or f"concurrency {s['concurrency']}"
        out.print(f"saturation at context {ctx}: {load} → {s['output_throughput']:,.1f} output tok/s", highlight=False)
