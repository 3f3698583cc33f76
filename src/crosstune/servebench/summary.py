"""A sweep's summary.json: its one reader (`load_summary`; typed cells: summary_cells.read_sweep), plots of it and
`bench compare A B` (two summaries side by side, with ratios). crosstune.servebench.sweep writes it."""

from __future__ import annotations

from pathlib import Path

from crosstune.confinement import inside
from crosstune.servebench.request_metrics import load_of
from crosstune.untrusted_files import read_json

COMPARED = (
    "request_throughput",
    "output_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "median_itl_ms",
    "p99_e2el_ms",
)


SUMMARY_JSON = "summary.json"


def summary_file(path: Path) -> Path:
    """A sweep's summary: `path` itself, or the summary.json in the folder `path` (a ConfinementError when it is a
    link out of that folder)."""
    path = Path(path)
    if path.is_dir():
        inside(path, SUMMARY_JSON, label="the folder")
        return path / SUMMARY_JSON
    return path


def _parsed(path: Path) -> object:
    return read_json(summary_file(path))


def load_summary(path: Path) -> dict:
    """The summary at `path` (a file or its folder); ValueError naming the file when it is not a sweep's summary."""
    path = summary_file(path)
    try:
        data = _parsed(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: can't read a bench summary: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise ValueError(f"{path}: no `cells` list: not a `crosstune bench serve` summary")
    return data


def is_sweep_summary(path: Path) -> bool:
    """Whether `path` (a file or its folder) holds what a sweep writes: a JSON object with `cells`; the report sorts
    its inputs by this, then load_summary reads it or says why not."""
    try:
        data = _parsed(path)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "cells" in data


_level = load_of
CLIENT_TIMED = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "median_itl_ms")  # wrong for bursty streams


def write_plots(summary: dict, out_dir: Path) -> list[Path]:
    """throughput vs concurrency per context; TTFT p50/p99 vs context; latency vs throughput; the Pareto frontier
    (servebench.pareto)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in summary["cells"] if c["completed"]]
    if not cells:
        return []
    contexts = sorted({c["context_len"] for c in cells})
    by_ctx = {ctx: sorted((c for c in cells if c["context_len"] == ctx), key=_level) for ctx in contexts}
    xlabel = "request rate (req/s)" if cells[0].get("request_rate") is not None else "concurrency"
    paths = []

    fig, ax = plt.subplots(figsize=(6, 4))
    for ctx, rows in by_ctx.items():
        ax.plot([_level(c) for c in rows], [c["output_throughput"] for c in rows], marker="o", label=f"ctx {ctx}")
    ax.set(xlabel=xlabel, ylabel="output tokens / s", title="Throughput vs load", xscale="log")
    ax.legend()
    paths.append(_save(fig, out_dir / "throughput_vs_load.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for level in sorted({_level(c) for c in cells}):
        rows = [c for c in cells if _level(c) == level]
        x = [c["context_len"] for c in rows]
        (line,) = ax.plot(x, [c["median_ttft_ms"] for c in rows], marker="o", label=f"p50 @{level}")
        ax.plot(x, [c["p99_ttft_ms"] for c in rows], ls="--", color=line.get_color(), label=f"p99 @{level}")
    ax.set(xlabel="context tokens", ylabel="TTFT ms", title="TTFT vs context", xscale="log")
    ax.legend(fontsize="small")
    paths.append(_save(fig, out_dir / "ttft_vs_context.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for ctx, rows in by_ctx.items():
        x, y = [c["output_throughput"] for c in rows], [c["median_e2el_ms"] for c in rows]
        ax.plot(x, y, marker="o", label=f"ctx {ctx}")
    ax.set(xlabel="output tokens / s", ylabel="median E2E latency ms", title="Latency vs throughput")
    ax.legend()
    paths.append(_save(fig, out_dir / "latency_vs_throughput.png"))
    from crosstune.servebench.pareto import write_pareto

    if pareto := write_pareto(summary, out_dir):
        paths.append(pareto)
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def compare_rows(a: dict, b: dict) -> list[dict]:
    """One row per (context, level) present in both, per compared metric: A, B, B/A, and the sides ("A", "B") whose
    cell was bursty where the metric is client-timed (then not a server figure)."""
    index_b = {(c["context_len"], _level(c)): c for c in b["cells"]}
    rows = []
    for ca in a["cells"]:
        cb = index_b.get((ca["context_len"], _level(ca)))
        if cb is None:
            continue
        bursty = [side for side, c in (("A", ca), ("B", cb)) if not c.get("client_timing_reliable", True)]
        for m in COMPARED:
            va, vb = ca.get(m), cb.get(m)
            ratio = vb / va if va and vb is not None else None
            rows.append(
                {
                    "context_len": ca["context_len"],
                    "level": _level(ca),
                    "metric": m,
                    "a": va,
                    "b": vb,
                    "ratio": ratio,
                    "bursty": bursty if m in CLIENT_TIMED else [],
                }
            )
    return rows
