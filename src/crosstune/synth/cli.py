"""`crosstune synth --out DIR --n N --seed S`: the synthetic corpus (crosstune.synth.generate_corpus)."""

from __future__ import annotations

from pathlib import Path

import typer

from crosstune.synth import generate_corpus


def register(app: typer.Typer) -> None:
    app.command("synth")(synth)


def synth(
    out: Path = typer.Option(
        ..., "--out", help="Output directory; created if missing; new, empty, or an earlier corpus (with --force)."
    ),
    n: int = typer.Option(..., "--n", help="Number of training records written to OUT/train.jsonl."),
    seed: int = typer.Option(..., "--seed", help="Random seed; the same seed and counts give byte-identical files."),
    n_eval: int = typer.Option(
        24, "--n-eval", help="Number of eval problems in OUT/eval/ (16 or more covers every task kind)."
    ),
    force: bool = typer.Option(
        False, "--force", help="Replace an earlier corpus in OUT: only one synth wrote, unchanged; else refused."
    ),
) -> None:
    """Generate a synthetic Verilog corpus from 16 parametrised hardware task kinds.

    OUT/train.jsonl: CodeV-R1 SFT records (system, prompt, response = <think> reasoning + ```verilog answer).
    OUT/eval/: VerilogEval v2 spec-to-rtl problems (problems.txt, ProbNNN_*_prompt.txt, _ref.sv, _test.sv).
    OUT/manifest.json: seed, counts per task kind and the parameters of every record and problem.
    OUT/.crosstune-synth.json: every file's sha256, the proof --force needs to replace the folder.
    Train and eval never share a (task kind, parameters) pair.
    """
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    console = Console()
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("Generating", total=n + n_eval)
        summary = generate_corpus(out, n, n_eval, seed, force=force, progress=lambda k: bar.advance(task, k))
    table = Table(title=f"Synthetic corpus in {summary.out_dir} (seed {seed})")
    table.add_column("task kind")
    table.add_column("train", justify="right")
    table.add_column("eval", justify="right")
    for kind, (n_train, n_eval_kind) in summary.counts.items():
        table.add_row(kind, str(n_train), str(n_eval_kind))
    table.add_row("[bold]total[/bold]", str(summary.n_train), str(summary.n_eval))
    console.print(table)
