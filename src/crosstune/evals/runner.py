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
from crosstune.evals.endpoint import EndpointBackend, Timeouts
from crosstune.evals.evaluate import EvalReport, evaluate_completions
from crosstune.evals.generate import Backend, GenerationError, TransformersBackend, generate_completions
from crosstune.evals.problems import ProblemSetError, load_problems
from crosstune.evals.sandbox import Limits
from crosstune.evals.verdict import CATEGORIES

console = Console()
PARTIAL_EXIT_CODE = 3  # the report is written, but some samples could not be generated
INTERRUPTED_EXIT_CODE = 130  # the shell's code for SIGINT


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
    rate = summary["upstream_pass_rate"]
    console.print(f"upstream-style pass rate: {'n/a' if rate is None else f'{rate:.2f}'}")
    console.print("categories: " + ", ".join(f"{c} {CATEGORIES[c]} ×{n}" for c, n in summary["categories"].items()))
    console.print(f"reports: {', '.join(str(p) for p in report.paths)}")
    generation = summary.get("generation")
    if generation and generation["failed"]:
        console.print(f"[red]{generation['failed']} of {generation['requested']} samples failed to generate[/red]; "
                      "the numbers above cover the completed samples only:")  # fmt: skip
        for failure in generation["failed_samples"][:10]:
            console.print(f"  {failure['problem']} sample {failure['sample']}: {failure['reason']}", markup=False)
        if generation["failed"] > 10:
            console.print(f"  … {generation['failed'] - 10} more in summary.json and summary.md")
        console.print("Rerun the same command to retry only the failed samples (completed ones are cached).")


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
    request_timeouts: Timeouts | None = None,
    retries: int = 5,
) -> EvalReport:
    """Generate (cached), judge and report. Ctrl-C during generation exits 130 after saying what was kept."""
    generated = {"done": 0, "total": 0}
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

            completions, failure_reasons = None, None
            if samples_file is not None:
                completions = load_samples_file(samples_file)
                extra["samples_file"] = str(samples_file)
            elif not references_only:
                backend: Backend = (
                    EndpointBackend(endpoint, model, api_key, request_timeouts or Timeouts(), retries)  # type: ignore[arg-type]
                    if endpoint
                    else TransformersBackend(hf_model)  # type: ignore[arg-type]
                )
                cache = CompletionCache(out / "completions.jsonl")

                def on_generated(done: int, total: int) -> None:
                    generated.update(done=done, total=total)
                    on_progress("generation", done, total)

                generation = generate_completions(
                    problems, backend, params, cache, prompt_style, shots, concurrency, on_generated
                )
                completions, failure_reasons = generation.completions, generation.failure_reasons
                extra.update(model=backend.model, sampling=asdict(params), prompt_style=prompt_style, shots=shots)
            report = evaluate_completions(
                problems, completions, out, ks=ks, upstream_compatible=upstream_compatible, workers=workers,
                limits=Limits(timeout_s=timeout, memory_mib=memory_mib), on_progress=on_progress,
                extra_summary=extra, failure_reasons=failure_reasons,
            )  # fmt: skip
    except (ProblemSetError, GenerationError, FileNotFoundError, ValueError) as e:
        console.print(f"error: {e}", style="red", markup=False)  # a message may hold [brackets]
        raise typer.Exit(1) from e
    except KeyboardInterrupt:
        console.print(_interrupted_message(out, generated), style="yellow", markup=False)
        raise typer.Exit(INTERRUPTED_EXIT_CODE) from None
    show_report(report)
    return report


def _interrupted_message(out: Path, generated: dict[str, int]) -> str:
    if not generated["total"]:
        return "interrupted: no report was written."
    return (f"interrupted: {generated['done']} of {generated['total']} samples are kept in "
            f"{out / 'completions.jsonl'}; no report was written. Run the same command again to resume: only the "
            "missing samples are requested.")  # fmt: skip
