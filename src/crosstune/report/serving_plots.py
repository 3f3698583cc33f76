"""The report's serving charts: the compared sweeps (hardware, backend or model) are the colours; each context
length gets its own panels; ticks sit at the loads and context lengths that were measured (not at 2⁰, 2¹, …)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from crosstune.report.plots import DPI, LEGEND_SIZE, LINESTYLES, MARKERS, colour, png, pyplot, text
from crosstune.servebench.summary_cells import Sweep

MAX_COLUMNS = 4


def _measured_ticks(ax, values: Sequence[float]) -> None:
    """Log-2 x axis with a tick at each measured value, labelled as a plain number."""
    ticks = sorted(set(values))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [f"{v:g}" for v in ticks])
    ax.minorticks_off()


def _plain_log_y(ax) -> None:
    """Log y axis labelled 20, 50, 100, 200 … (not 10¹, 10² with unlabelled ticks between)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _style(k: int, sweep: Sweep, size: float) -> dict:
    """Sweep k's colour, line style and marker: the same in every panel and chart."""
    return {
        "color": colour(k),
        "linestyle": LINESTYLES[k % len(LINESTYLES)],
        "marker": MARKERS[k % len(MARKERS)],
        "ms": size,
        "linewidth": 2,
        "label": text(sweep.label),
    }


def serving_figure(sweeps: Sequence[Sweep], latency: str = "median_ttft_ms"):
    """Per context length, output throughput (top) and TTFT (bottom) against the load; one colour per sweep."""
    plt = pyplot()
    contexts = sorted({c for s in sweeps for c in s.contexts})
    ncols = min(MAX_COLUMNS, len(contexts))
    blocks = math.ceil(len(contexts) / ncols)
    fig, axes = plt.subplots(2 * blocks, ncols, figsize=(3.0 * ncols + 1.2, 5.6 * blocks + 0.9), dpi=DPI, squeeze=False)
    rate = any(s.declared.get("load") == "request rate (req/s)" for s in sweeps)
    load = "request rate (req/s)" if rate else "concurrent requests"
    for n, context in enumerate(contexts):
        top, bottom = axes[2 * (n // ncols)][n % ncols], axes[2 * (n // ncols) + 1][n % ncols]
        loads: list[float] = []
        for k, sweep in enumerate(sweeps):
            cells = sweep.at(context)
            if not cells:
                continue
            style = _style(k, sweep, 5)
            loads += [c.concurrency for c in cells]
            top.plot([c.concurrency for c in cells], [c.output_throughput for c in cells], **style)
            points = [(c.concurrency, c.latency(latency)) for c in cells if c.latency(latency) is not None]
            if points:
                bottom.plot(*zip(*points, strict=True), **style)
        top.set_title(f"context {context:,} tokens", fontsize=10)
        top.set_ylabel("output tokens / s")
        bottom.set_ylabel(f"{latency.split('_')[0]} TTFT (ms, log)")
        _plain_log_y(bottom)
        bottom.set_xlabel(load)
        for ax in (top, bottom):
            if loads:
                _measured_ticks(ax, loads)
            ax.grid(alpha=0.3)
    for n in range(len(contexts), blocks * ncols):  # panels left over in the last block
        axes[2 * (n // ncols)][n % ncols].set_visible(False)
        axes[2 * (n // ncols) + 1][n % ncols].set_visible(False)
    handles, labels = _legend_entries(axes)
    # the figure is wider than the page: a larger font keeps the legend as large as the body text there
    fig.legend(handles, labels, loc="upper center", ncol=min(4, len(labels)), fontsize=LEGEND_SIZE + 2, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (5.6 * blocks + 0.9) * (1 + (len(labels) - 1) // 4)))
    return fig


def _legend_entries(axes) -> tuple[list, list[str]]:
    seen: dict[str, object] = {}
    for row in axes:
        for ax in row:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                seen.setdefault(label, handle)
    return list(seen.values()), list(seen)


def serving_sweeps(sweeps: Sequence[Sweep], latency: str = "median_ttft_ms") -> bytes:
    return png(serving_figure(sweeps, latency))


def contexts_figure(sweeps: Sequence[Sweep], latency: str = "median_ttft_ms"):
    """Against the context length: the peak output throughput, and the TTFT at the lowest load measured (the
    latency before any queueing); one colour per sweep, ticks at the measured context lengths."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=DPI)
    contexts = sorted({c for s in sweeps for c in s.contexts})
    for k, sweep in enumerate(sweeps):
        style = _style(k, sweep, 6)
        peak = [(c, max(x.output_throughput for x in sweep.at(c))) for c in sweep.contexts]
        left.plot(*zip(*peak, strict=True), **style)
        first = [(c, sweep.at(c)[0].latency(latency)) for c in sweep.contexts]
        first = [(c, v) for c, v in first if v is not None]
        if first:
            right.plot(*zip(*first, strict=True), **style)
    left.set(ylabel="peak output tokens / s", title="Peak throughput by context length")
    right.set(ylabel=f"{latency.split('_')[0]} TTFT (ms, log)", title="TTFT at the lowest load measured")
    _plain_log_y(right)
    for ax in (left, right):
        _measured_ticks(ax, contexts)
        ax.set_xlabel("context length (prompt tokens)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=LEGEND_SIZE)
    fig.tight_layout()
    return fig


def serving_contexts(sweeps: Sequence[Sweep], latency: str = "median_ttft_ms") -> bytes:
    return png(contexts_figure(sweeps, latency))


def _pareto_points(sweep: Sweep) -> list[dict]:
    """A sweep's cells as servebench.pareto's points (the one frontier rule), per chip of its target."""
    from crosstune.servebench.pareto import chips, per_user

    n, _ = chips(sweep.target)
    rate = sweep.declared.get("load") == "request rate (req/s)"  # Cell.concurrency then holds the rate
    pts = []
    for c in sweep.cells:
        row = {
            "output_throughput_per_user": c.output_throughput_per_user,
            "output_throughput": c.output_throughput,
            "concurrency": None if rate else c.concurrency,
            "request_rate": c.concurrency if rate else None,
        }
        user = per_user(row)
        if c.completed and user:
            pts.append({"per_user": user, "per_chip": c.output_throughput / n, "throughput": c.output_throughput})
    return pts


def pareto_figure(sweeps: Sequence[Sweep], usd_per_hour: Sequence[float | None]):
    """Tokens/s per user against tokens/s per chip (left) and output tokens per dollar (right, sweeps with a price):
    every cell a point, each sweep's Pareto frontier a line (servebench.pareto.frontier)."""
    from crosstune.servebench.pareto import frontier, tokens_per_dollar

    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=DPI)
    for k, (sweep, price) in enumerate(zip(sweeps, usd_per_hour, strict=True)):
        pts = _pareto_points(sweep)
        if not pts:
            continue
        for p in pts:
            p["per_dollar"] = tokens_per_dollar(p["throughput"], price) if price else None
        style = _style(k, sweep, 5)
        for ax, y in ((left, "per_chip"), (right, "per_dollar")):
            if y == "per_dollar" and not price:
                continue
            ax.scatter(
                [p["per_user"] for p in pts],
                [p[y] for p in pts],
                color=style["color"],
                marker=style["marker"],
                alpha=0.35,
                s=18,
            )
            line = frontier(pts, y)
            ax.plot([p["per_user"] for p in line], [p[y] for p in line], **style)
    left.set(ylabel="output tokens / s per chip", title="Throughput per chip vs interactivity")
    right.set(ylabel="output tokens per $", title="Output tokens per dollar vs interactivity")
    for ax in (left, right):
        ax.set_xlabel("output tokens / s per user")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=LEGEND_SIZE)
    fig.tight_layout()
    return fig


def serving_pareto(sweeps: Sequence[Sweep], usd_per_hour: Sequence[float | None]) -> bytes:
    return png(pareto_figure(sweeps, usd_per_hour))
