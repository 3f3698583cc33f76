"""The report's charts as PNG bytes (matplotlib, Agg): every chart has labelled axes with units and a legend."""

from __future__ import annotations

import io
from collections.abc import Sequence

from crosstune.compare.runs import RunSummary
from crosstune.compare.sweeps import Sweep
from crosstune.compare.tco import Option, Workload

DPI = 100


def _figure(width: float = 7.5, height: float = 4.2):
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers
    import matplotlib.pyplot as plt

    return plt, *plt.subplots(figsize=(width, height), dpi=DPI)


def _png(plt, fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def loss_curves(runs: Sequence[RunSummary], statement: str, comparable: bool) -> bytes:
    """All runs' loss on one chart; `statement` (the shared loss definition, or why it isn't) is written on it."""
    plt, fig, ax = _figure()
    for run in runs:
        marker = "o" if len(run.rows) <= 60 else None
        ax.plot([r["step"] for r in run.rows], [r["loss"] for r in run.rows], marker=marker, ms=3, label=run.label)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (nats per trained token)")
    ax.set_title("Training loss")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.text(
        0.01,
        0.02,
        statement,
        transform=ax.transAxes,
        fontsize=8,
        color="black" if comparable else "red",
        bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none" if comparable else "red"},
    )
    return _png(plt, fig)


def throughput(runs: Sequence[RunSummary]) -> bytes:
    """Trained tokens/s per step, and MFU per step beside it when any run recorded one (CPU runs have none)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_mfu = [r for r in runs if any(row.get("mfu") is not None for row in r.rows)]
    fig, axes = plt.subplots(1, 2 if with_mfu else 1, figsize=(10 if with_mfu else 7.5, 4), dpi=DPI, squeeze=False)
    left = axes[0][0]
    for run in runs:
        left.plot([r["step"] for r in run.rows], [r["trained_tokens_per_s"] for r in run.rows], label=run.label)
    title = "Training throughput" + ("" if with_mfu else " (MFU: none recorded — no bf16 peak on CPU)")
    left.set(xlabel="optimizer step", ylabel="trained tokens / s (all devices)", title=title)
    if with_mfu:
        right = axes[0][1]
        for run in with_mfu:
            points = [(r["step"], 100 * r["mfu"]) for r in run.rows if r.get("mfu") is not None]
            right.plot(*zip(*points, strict=True), label=run.label)
        right.set(xlabel="optimizer step", ylabel="MFU (%, LoRA 4N convention)", title="Model FLOPs utilisation")
    for ax in axes[0]:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    return _png(plt, fig)


def serving_sweeps(sweeps: Sequence[Sweep], latency: str = "median_ttft_ms") -> bytes:
    """Output throughput and TTFT against concurrency: colour = context length, line style = sweep."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 5.2), dpi=DPI)
    contexts = sorted({c for s in sweeps for c in s.contexts})
    colours = {c: plt.cm.viridis(i / max(1, len(contexts) - 1)) for i, c in enumerate(contexts)}  # type: ignore[attr-defined]
    styles = ["-", "--", ":", "-."]
    for k, sweep in enumerate(sweeps):
        for context in sweep.contexts:
            cells = sweep.at(context)
            x = [c.concurrency for c in cells]
            kw = {"color": colours[context], "linestyle": styles[k % len(styles)], "marker": "o", "ms": 3}
            left.plot(x, [c.output_throughput for c in cells], label=f"{sweep.label} · ctx {context}", **kw)
            ttft = [(c.concurrency, c.latency(latency)) for c in cells if c.latency(latency) is not None]
            if ttft:
                right.plot(*zip(*ttft, strict=True), label=f"{sweep.label} · ctx {context}", **kw)
    left.set(xlabel="concurrent requests", ylabel="output tokens / s", title="Serving throughput")
    right.set(
        xlabel="concurrent requests",
        ylabel=f"{latency.split('_')[0]} TTFT (ms, log scale)",
        title="Time to first token",
    )
    right.set_yscale("log")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    # one legend under both panels (they share lines): inside either panel it would hide the curves
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.06 * (1 + (len(labels) - 1) // 4), 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def eval_scores(evals: Sequence[tuple[str, dict]]) -> bytes:
    """pass@k per evaluation (left) and its failure categories as shares of all samples (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from crosstune.evals.verdict import CATEGORIES

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), dpi=DPI)
    ks = sorted({k for _, s in evals for k in s["pass_at_k"]}, key=int)
    width = 0.8 / max(1, len(evals))
    for i, (name, s) in enumerate(evals):
        values = [100 * (s["pass_at_k"].get(k) or 0.0) for k in ks]
        left.bar([j + i * width for j in range(len(ks))], values, width, label=name)
    left.set_xticks([j + width * (len(evals) - 1) / 2 for j in range(len(ks))], [f"pass@{k}" for k in ks])
    left.set(ylabel="pass rate (%)", title="VerilogEval pass@k", ylim=(0, 100))
    codes = [c for c in CATEGORIES if any(s["categories"].get(c) for _, s in evals)]
    bottoms = [0.0] * len(evals)
    for code in codes:
        shares = [100 * s["categories"].get(code, 0) / max(1, s["samples"]) for _, s in evals]
        right.barh([n for n, _ in evals], shares, left=bottoms, label=f"{code} {CATEGORIES[code][:38]}")
        bottoms = [b + v for b, v in zip(bottoms, shares, strict=True)]
    right.set(xlabel="share of samples (%)", ylabel="evaluation", title="Verdicts by category", xlim=(0, 100))
    left.legend(fontsize=8)
    right.legend(fontsize=6, loc="lower right")
    for ax in (left, right):
        ax.grid(alpha=0.3, axis="y" if ax is left else "x")
    return _png(plt, fig)


def tco_lines(options: Sequence[Option], workload: Workload, crossing: float | None) -> bytes:
    """Cumulative cost against days served, one line per option, the break-even day marked."""
    plt, fig, ax = _figure()
    horizon = max(workload.days, 2 * crossing if crossing else 0.0, 1.0)
    days = [horizon * i / 100 for i in range(101)]
    for option in options:
        ax.plot(days, [option.total(workload, d) for d in days], label=option.name)
    if crossing is not None:
        ax.axvline(crossing, color="grey", linestyle="--", label=f"break-even: day {crossing:,.1f}")
    ax.axvline(workload.days, color="black", linestyle=":", label=f"workload: {workload.days:g} days")
    ax.set(xlabel="days of serving", ylabel="cumulative cost (USD)", title="Total cost: train once + serve")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(plt, fig)
