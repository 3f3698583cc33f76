"""The loss curve of a run directory as a PNG (either backend: it reads only metrics.jsonl)."""

from __future__ import annotations

from pathlib import Path

from crosstune.run.layout import LOSS_PNG, METRICS_JSONL, RunDirError, is_run_dir
from crosstune.run.metrics import read_metrics
from crosstune.run.records import read_run_record


def plot_loss_curve(run_dir: Path, out: Path | None = None) -> Path:
    """Plot loss (and learning rate, on a second axis) against step into `out` (default <run>/loss.png)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    out = Path(out) if out else run_dir / LOSS_PNG
    rows = read_metrics(run_dir)
    if not rows:
        raise RunDirError(f"{run_dir / METRICS_JSONL} has no rows to plot")
    title = run_dir.name
    if is_run_dir(run_dir):
        record = read_run_record(run_dir)
        title = f"{record.recipe_name} ({record.backend}, {record.family}, LoRA r={record.lora.rank})"
    steps = [r.step for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(steps, [r.loss for r in rows], marker="o" if len(rows) <= 50 else None, ms=3, label="loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (mean CE over trained tokens)")
    ax.grid(alpha=0.3)
    lr_ax = ax.twinx()
    lr_ax.plot(steps, [r.learning_rate for r in rows], color="tab:orange", alpha=0.6, label="learning rate")
    lr_ax.set_ylabel("learning rate")
    ax.set_title(title)
    fig.legend(loc="upper right", bbox_to_anchor=(0.88, 0.88))
    fig.tight_layout()
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(out)
    return out
