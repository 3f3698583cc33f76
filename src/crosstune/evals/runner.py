"""What `crosstune eval` does: pick the design source, generate (cached), judge, show and write results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from crosstune.evals.cache import CompletionCache, SamplingParams, load_samples_file
from crosstune.evals.evaluate import EvalReport, evaluate_completions
from crosstune.evals.generate import (
    Backend,
    EndpointBackend,
    GenerationError,
    TransformersBackend,
    generate_completions,
)
from crosstune.evals.problems import ProblemSetError, load_problems
from crosstune.evals.sandbox import Limits
from crosstune.evals.verdict import CATEGORIES

console = Console()


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description:<11}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=False,
    )  # fmt: skip


def show_report(report: EvalReport) -> None:
    """Per-problem table, then headline numbers and the category legend."""
    summary = report.summary
    ks = list(summary["pass_at_k"])
    table = Table(title=f"VerilogEval ({summary['mode']} verdict)")
    for column in ["problem", "passed", *(f"pass@{k}" for k in ks), "codes"]:
        table.add_column(column, justify="left" if column in ("problem", "codes") else "right")
    for row in summary["per_problem"]:
        cells = ["n/a" if row["pass_at_k"][k] is None else f"{100 * row['pass_at_k'][k]:.1f}" for k in ks]
        table.add_row(row["problem"], f"{row['passed']}/{row['n']}", *cells, row["codes"])
    console.print(table)
    for k, value in summary["pass_at_k"].items():
        console.print(f"pass@{k}: [bold]{'n/a' if value is None else f'{100 * value:.2f} %'}[/bold]")
    console.print(f"upstream-style pass rate: {summary['upstream_pass_rate']:.2f}")
    console.print("categories: " + ", ".join(f"{c} {CATEGORIES[c]} ×{n}" for c, n in summary["categories"].items()))
    console.print(f"reports: {', '.join(str(p) for p in report.paths)}")


def run_eval(
    problems_path: Path,
    out: Path,
    task: str,
    patterns: Sequence[str] | None,
    endpoint: str | None,
    model: str | None,
    hf_model: Path | None,
    samples_file: Path | None,
    references_only: bool,
    n: int,
    ks: Sequence[int],
    temperature: float,
    top_p: float,
    max_tokens: int,
    seed: int,
    prompt_style: str,
    shots: int,
    concurrency: int,
    api_key: str | None,
    upstream_compatible: bool,
    workers: int | None,
    timeout: float,
    memory_mib: int,
) -> EvalReport:
    try:
        problems = load_problems(problems_path, task, list(patterns) if patterns else None)
        params = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
        extra: dict = {"problems_path": str(problems_path), "task": problems[0].task}
        with _progress() as progress:
            tasks: dict[str, int] = {}

            def on_progress(phase: str, done: int, total: int) -> None:
                if phase not in tasks:
                    tasks[phase] = progress.add_task(phase, total=total)
                progress.update(tasks[phase], completed=done, total=total)

            completions = None
            if samples_file is not None:
                completions = load_samples_file(samples_file)
                extra["samples_file"] = str(samples_file)
            elif not references_only:
                backend: Backend = (
                    EndpointBackend(endpoint, model, api_key=api_key) if endpoint else TransformersBackend(hf_model)  # type: ignore[arg-type]
                )
                cache = CompletionCache(out / "completions.jsonl")
                completions = generate_completions(
                    problems, backend, params, cache, prompt_style, shots, concurrency,
                    lambda done, total: on_progress("generation", done, total),
                )  # fmt: skip
                extra.update(model=backend.model, sampling=asdict(params), prompt_style=prompt_style, shots=shots)
            report = evaluate_completions(
                problems, completions, out, ks=ks, upstream_compatible=upstream_compatible, workers=workers,
                limits=Limits(timeout_s=timeout, memory_mib=memory_mib), on_progress=on_progress,
                extra_summary=extra,
            )  # fmt: skip
    except (ProblemSetError, GenerationError, FileNotFoundError, ValueError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(1) from e
    show_report(report)
    return report
