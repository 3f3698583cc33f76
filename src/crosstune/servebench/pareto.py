"""The serving Pareto frontier (`vllm bench sweep plot_pareto`'s chart): per cell, output tokens/s one user sees
against output tokens/s per chip (and per dollar), and the cells no other cell beats on both.

Tokens/s per user is the cell's `output_throughput_per_user` (Σ output / Σ E2EL, servebench.request_metrics), or, in a
summary from before it, throughput / concurrency as vLLM computes it. Chips come from the hardware target the sweep
names (crosstune.hardware); a sweep without one counts as one chip, and says so. The bench's own chart prices a target
from the catalog's on-demand price; the report prices it through its price book (compare.cost.prices, overrides
included)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from crosstune.hardware import HARDWARE
from crosstune.servebench.request_metrics import describe_load


def chips(target: str | None) -> tuple[int, str]:
    """(chips, how they were counted) of a sweep's target."""
    hw = HARDWARE.get(target or "")
    if hw is None:
        return 1, f"target {target!r} unknown: per server" if target else "no --target: per server"
    return hw.devices, f"{hw.devices} chips ({hw.name})"


def per_user(cell: dict) -> float | None:
    value = cell.get("output_throughput_per_user")
    if value is None and cell.get("request_rate") is None and cell.get("concurrency"):
        value = cell["output_throughput"] / cell["concurrency"]
    return value


def points(summary: dict) -> list[dict]:
    """One point per cell that completed a request: load, context, tokens/s per user and per chip."""
    n, _ = chips(summary.get("target"))
    out = []
    for c in summary["cells"]:
        user = per_user(c)
        if c["completed"] and user:
            throughput = c["output_throughput"]
            out.append(
                {
                    "context_len": c["context_len"],
                    "load": describe_load(c),
                    "per_user": user,
                    "per_chip": throughput / n,
                    "output_throughput": throughput,
                }
            )
    return out


def frontier(pts: Sequence[dict], y: str = "per_chip") -> list[dict]:
    """The points no other point beats on both tokens/s per user and `y` (ties kept), by tokens/s per user."""
    best = [
        p
        for p in pts
        if not any(
            q["per_user"] >= p["per_user"] and q[y] >= p[y] and (q["per_user"], q[y]) != (p["per_user"], p[y])
            for q in pts
        )
    ]
    return sorted(best, key=lambda p: p["per_user"])


def tokens_per_dollar(output_throughput: float, usd_per_hour: float) -> float:
    """Output tokens one dollar of the whole target buys at this throughput."""
    return output_throughput * 3600.0 / usd_per_hour


def write_pareto(summary: dict, out_dir: Path) -> Path | None:
    """pareto.png beside the summary: per chip (left) and, when the catalog prices the target, per dollar (right);
    one frontier per context length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = points(summary)
    if not pts:
        return None
    hw = HARDWARE.get(summary.get("target") or "")
    price = hw.price_per_hour if hw is not None else None
    for p in pts:
        p["per_dollar"] = tokens_per_dollar(p["output_throughput"], price) if price else None
    panels = [("per_chip", f"output tokens / s per chip ({chips(summary.get('target'))[1]})")]
    if price:
        panels.append(("per_dollar", f"output tokens per $ (catalog ${price:,.2f}/h on-demand)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.4), squeeze=False)
    for ax, (y, label) in zip(axes[0], panels, strict=True):
        for ctx in sorted({p["context_len"] for p in pts}):  # a frontier per context: one workload each
            mine = [p for p in pts if p["context_len"] == ctx]
            dots = ax.scatter([p["per_user"] for p in mine], [p[y] for p in mine], alpha=0.5)
            line = frontier(mine, y)
            ax.plot(
                [p["per_user"] for p in line],
                [p[y] for p in line],
                color=dots.get_facecolor()[0],
                lw=1.5,
                marker="o",
                label=f"ctx {ctx} frontier",
            )
            for p in line:
                ax.annotate(
                    p["load"].replace("concurrency ", "c="),
                    (p["per_user"], p[y]),
                    fontsize=7,
                    textcoords="offset points",
                    xytext=(4, 4),
                )
        ax.set(xlabel="output tokens / s per user", ylabel=label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"{summary['model']}: interactivity vs throughput")
    fig.tight_layout()
    path = out_dir / "pareto.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
