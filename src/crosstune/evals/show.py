"""What `crosstune eval` and the demo show of an evaluation: progress bars while it runs, then the report."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from crosstune.evals.evaluate import EvalReport
from crosstune.evals.judge.scoring import benchmark_name
from crosstune.evals.judge.verdict import CATEGORIES
from crosstune.evals.runner import OnProgress


@contextmanager
def progress_bars(console: Console) -> Iterator[OnProgress]:
    """An `on_progress` for run_eval that draws one bar per phase (generation, references, simulation)."""
    columns = (TextColumn("[bold]{task.description:<11}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        tasks: dict[str, int] = {}

        def on_progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = progress.add_task(phase, total=total)
            progress.update(tasks[phase], completed=done, total=total)

        yield on_progress


def show_report(report: EvalReport, console: Console) -> None:
    """Per-problem table, then headline numbers and the category legend."""
    summary = report.summary
    ks = list(summary["pass_at_k"])
    table = Table(title=f"{benchmark_name(summary)} ({summary['mode']} verdict)")
    for column in ["problem", "passed", *(f"pass@{k}" for k in ks), "codes"]:
        table.add_column(column, justify="left" if column in ("problem", "codes") else "right")
    for row in summary["per_problem"]:
        cells = ["n/a" if row["pass_at_k"][k] is None else f"{100 * row['pass_at_k'][k]:.1f}" for k in ks]
        table.add_row(row["problem"], f"{row['passed']}/{row['n']}", *cells, row["codes"])
    console.print(table)
    intervals = summary.get("pass_at_k_ci") or {}
    for k, value in summary["pass_at_k"].items():
        bounds = intervals.get(k)
        interval = f" (95 % interval {100 * bounds[0]:.1f}–{100 * bounds[1]:.1f} %)" if bounds else ""
        console.print(f"pass@{k}: [bold]{'n/a' if value is None else f'{100 * value:.2f} %'}[/bold]{interval}")
    if summary.get("engine"):
        console.print(f"engine: {summary['engine'].get('name')}", markup=False)
    _show_cache(report, console)
    if summary.get("protocol"):
        departs = summary["protocol"].get("deviations")
        console.print(
            f"protocol: {summary['protocol']['name']}" + (f" (departs in {', '.join(departs)})" if departs else ""),
            markup=False,
        )
    rate = summary["upstream_pass_rate"]
    console.print(f"upstream-style pass rate: {'n/a' if rate is None else f'{rate:.2f}'}")
    console.print("categories: " + ", ".join(f"{c} {CATEGORIES[c]} ×{n}" for c, n in summary["categories"].items()))
    console.print(f"reports: {', '.join(str(p) for p in report.paths)}")
    generation = report.summary_record.generation
    if generation is not None and generation.failed:
        console.print(
            f"[red]{generation.failed} of {generation.requested} samples failed to generate[/red]; "
            "the numbers above cover the completed samples only:"
        )
        for failure in generation.failed_samples[:10]:
            console.print(f"  {failure.problem} sample {failure.sample}: {failure.reason}", markup=False)
        if generation.failed > 10:
            console.print(f"  … {generation.failed - 10} more in summary.json and summary.md")
        console.print("Rerun the same command to retry only the failed samples (completed ones are cached).")


def _show_cache(report: EvalReport, console: Console) -> None:
    """How many samples came from the completion cache, and what the cache could not check."""
    generation, identity = report.summary_record.generation, report.summary.get("model_identity") or {}
    if generation is None or generation.from_cache is None:
        return
    cached, requested = generation.from_cache, generation.requested
    cache = report.paths[0].parent / "completions.jsonl" if report.paths else "completions.jsonl"
    console.print(
        f"samples: {cached} of {requested} from the cache ({cache}), {requested - cached} generated", markup=False
    )
    if cached and "weights" in identity and identity["weights"] is None:
        console.print(
            f"  the served model's folder ({identity.get('root')}) is not on this machine: its cached "
            "samples are trusted by served name and folder; remove the cache if the model changed",
            style="yellow",
            markup=False,
        )
