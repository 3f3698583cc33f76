"""The report's charts as PNG bytes (matplotlib, Agg): labelled axes with units, legends readable at the page's
size, and one colour per compared thing (run, sweep, model, option) from PALETTE — every colour at least 3:1
against the white background (WCAG's contrast for graphics), so no line is near-invisible.

Serving charts: serving_plots.py. Each chart has a `*_figure` (the matplotlib Figure, for tests) and a bytes form.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

from crosstune.cost.tco import Option, Workload
from crosstune.run.run_summary import RunSummary

DPI = 100
LEGEND_SIZE = 10  # points: at DPI 100 and the page's 1200 px, as large as the body text
# Okabe-Ito's colour-blind-safe palette without its yellow, orange and sky blue (under 3:1 on white), then darker
# distinct hues. Contrast ratios against white: 5.1, 3.9, 3.4, 3.1, 21, 5.9, 7.0, 7.9.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#000000", "#8C564B", "#595959", "#6A3D9A")
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
PASS_COLOUR = "#009E73"  # a passing verdict is the green of the palette in every chart


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def text(label: str) -> str:
    """A label matplotlib draws as written: `$…$` would otherwise be parsed as mathtext (and may not parse)."""
    return str(label).replace("$", r"\$")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers
    import matplotlib.pyplot as plt

    return plt


def png(fig) -> bytes:
    plt = pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return buf.getvalue()


def loss_figure(runs: Sequence[RunSummary], statement: str, comparable: bool):
    """All runs' loss on one chart, each in its own colour, line style and markers (so coinciding curves both show),
    and, for two runs or more, a panel of each run's difference to the first at the steps both logged."""
    plt = pyplot()
    with_diff = len(runs) >= 2
    fig, axes = plt.subplots(
        2 if with_diff else 1,
        1,
        figsize=(8, 6.4 if with_diff else 4.4),
        dpi=DPI,
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": [3, 1.4]} if with_diff else None,
    )
    ax = axes[0][0]
    for i, run in enumerate(runs):
        steps = [r.step for r in run.rows]
        every = max(len(runs), len(steps) // 12)  # markers of the runs take turns: each shows where curves meet
        ax.plot(
            steps,
            [r.loss for r in run.rows],
            color=colour(i),
            linestyle=LINESTYLES[i % len(LINESTYLES)],
            linewidth=2.2 - 0.5 * min(i, 2),
            marker=MARKERS[i % len(MARKERS)],
            ms=6,
            mfc="none",
            markevery=(i * every // len(runs), every),
            label=text(run.label),
        )
    ax.set_ylabel("training loss (nats per trained token)")
    ax.set_title("Training loss")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=LEGEND_SIZE)
    ax.text(
        0.01,
        0.03,
        text(statement),
        transform=ax.transAxes,
        fontsize=9,
        color="black" if comparable else "#B00020",
        bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none" if comparable else "#B00020"},
    )
    if with_diff:
        diff = axes[1][0]
        first = {r.step: r.loss for r in runs[0].rows}
        diff.axhline(0, color=colour(0), linewidth=1.5, label=text(runs[0].label))
        for i, run in enumerate(runs[1:], 1):
            points = [(r.step, r.loss - first[r.step]) for r in run.rows if r.step in first]
            if points:
                diff.plot(
                    *zip(*points, strict=True),
                    color=colour(i),
                    linestyle=LINESTYLES[i % len(LINESTYLES)],
                    marker=MARKERS[i % len(MARKERS)],
                    ms=4,
                    label=text(run.label),
                )
        diff.set_ylabel("difference (nats)")
        diff.set_title(f"Each run's loss minus {text(runs[0].label)}'s at the same step (0: they coincide)", fontsize=9)
        diff.grid(alpha=0.3)
    axes[-1][0].set_xlabel("optimizer step")
    fig.tight_layout()
    return fig


def loss_curves(runs: Sequence[RunSummary], statement: str, comparable: bool) -> bytes:
    return png(loss_figure(runs, statement, comparable))


def throughput(runs: Sequence[RunSummary]) -> bytes:
    """Trained tokens/s per step, and MFU per step beside it when any run recorded one (CPU runs have none)."""
    plt = pyplot()
    with_mfu = [r for r in runs if any(row.mfu is not None for row in r.rows)]
    fig, axes = plt.subplots(1, 2 if with_mfu else 1, figsize=(11 if with_mfu else 8, 4.2), dpi=DPI, squeeze=False)
    left = axes[0][0]
    for i, run in enumerate(runs):
        left.plot(
            [r.step for r in run.rows],
            [r.trained_tokens_per_s for r in run.rows],
            color=colour(i),
            linestyle=LINESTYLES[i % len(LINESTYLES)],
            label=text(run.label),
        )
    title = "Training throughput" + ("" if with_mfu else " (MFU: none recorded — no bf16 peak on CPU)")
    left.set(xlabel="optimizer step", ylabel="trained tokens / s (all devices)", title=title)
    if with_mfu:
        right = axes[0][1]
        for i, run in enumerate(runs):
            points = [(r.step, 100 * r.mfu) for r in run.rows if r.mfu is not None]
            if points:
                right.plot(*zip(*points, strict=True), color=colour(i), label=text(run.label))
        right.set(xlabel="optimizer step", ylabel="MFU (%, LoRA 4N convention)", title="Model FLOPs utilisation")
    for ax in axes[0]:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=LEGEND_SIZE, loc="best")
    fig.tight_layout()
    return png(fig)


def tco_figure(options: Sequence[Option], workload: Workload, crossing: float | None):
    """Cumulative cost against days served, one line per option, the break-even day marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.4), dpi=DPI)
    horizon = max(workload.days, 2 * crossing if crossing else 0.0, 1.0)
    days = [horizon * i / 100 for i in range(101)]
    for i, option in enumerate(options):
        ax.plot(
            days,
            [option.total(workload, d) for d in days],
            color=colour(i),
            linestyle=LINESTYLES[i % len(LINESTYLES)],
            linewidth=2,
            label=text(option.name),
        )
    if crossing is not None:
        ax.axvline(crossing, color="#595959", linestyle="--", label=f"break-even: day {crossing:,.1f}")
    ax.axvline(workload.days, color="black", linestyle=":", label=f"workload: {workload.days:g} days")
    ax.set(xlabel="days of serving", ylabel="cumulative cost (USD)", title="Total cost: train once + serve")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=LEGEND_SIZE)
    fig.tight_layout()
    return fig


def tco_lines(options: Sequence[Option], workload: Workload, crossing: float | None) -> bytes:
    return png(tco_figure(options, workload, crossing))


def pass_at_k_figure(groups: Sequence):
    """pass@k bars, one panel per evaluation protocol (crosstune.report.eval_groups.EvalGroup): one bar per
    evaluation and k, coloured by model (the same model has the same colour in every panel), values written on."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(groups), figsize=(max(8.0, 4.6 * len(groups)), 4.6), dpi=DPI, squeeze=False)
    models = list(dict.fromkeys(e.model for g in groups for e in g.evals))
    for ax, group in zip(axes[0], groups, strict=True):
        ks = sorted({k for e in group.evals for k in e.pass_at_k}, key=int)
        width = 0.8 / max(1, len(group.evals))
        for i, e in enumerate(group.evals):
            values = [100 * (e.pass_at_k.get(k) or 0.0) for k in ks]
            bars = ax.bar(
                [j + i * width for j in range(len(ks))],
                values,
                width,
                color=colour(models.index(e.model)),
                label=text(e.name),
            )
            ax.bar_label(bars, labels=[f"{v:.0f}" for v in values], fontsize=8, padding=2)
        ax.set_xticks([j + width * (len(group.evals) - 1) / 2 for j in range(len(ks))], [f"pass@{k}" for k in ks])
        ax.set(ylabel="pass rate (%)", ylim=(0, 109))
        ax.set_title(text(group.title), fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=LEGEND_SIZE - 1, loc="upper left")
    fig.suptitle("VerilogEval pass@k (evaluations side by side only within a protocol)")
    fig.tight_layout()
    return fig


def pass_at_k(groups: Sequence) -> bytes:
    return png(pass_at_k_figure(groups))


def verdict_shares(evals: Sequence) -> bytes:
    """Each evaluation's samples by verdict category, as shares of its judged samples (stacked bars)."""
    from crosstune.evals.judge.verdict import CATEGORIES

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.45 * len(evals)), dpi=DPI)
    codes = [c for c in CATEGORIES if any(e.summary.categories.get(c) for e in evals)]
    names = [text(e.name) for e in evals]
    bottoms = [0.0] * len(evals)
    others = [c for c in PALETTE if c != PASS_COLOUR]
    for i, code in enumerate(codes):
        shares = [100 * e.summary.categories.get(code, 0) / max(1, e.summary.samples) for e in evals]
        fill = PASS_COLOUR if code == "." else others[(i - ("." in codes)) % len(others)]
        short = re.split(r"[:(,]", CATEGORIES[code])[0].strip()
        ax.barh(
            names, shares, left=bottoms, color=fill, hatch="//" if i > len(others) else None, label=f"{code}  {short}"
        )
        bottoms = [b + v for b, v in zip(bottoms, shares, strict=True)]
    ax.set(xlabel="share of judged samples (%)", title="Verdicts by category", xlim=(0, 100))
    ax.invert_yaxis()  # the first evaluation on top, as in the tables
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return png(fig)
