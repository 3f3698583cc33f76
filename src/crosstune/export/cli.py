"""`crosstune export RUN_DIR --to adapter|merged|both --out DIR`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from crosstune.export import export_run

console = Console(soft_wrap=True, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    run_dir: Path = typer.Argument(..., help="a run directory written by `crosstune train` (either backend)"),
    to: str = typer.Option(..., "--to", help="adapter (PEFT), merged (HF safetensors, base + LoRA), or both"),
    out: Path = typer.Option(..., "--out", help="output directory (both: OUT/adapter and OUT/merged)"),
    step: int = typer.Option(None, "--step", help="checkpoint step to export (default: the final adapter / latest)"),
    base: Path = typer.Option(None, "--base", help="base model directory (default: run.json's base_model)"),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="replace --out when it is an earlier export, unchanged (its export_manifest.json)"
    ),
) -> None:
    """Export a run's LoRA as a PEFT adapter and/or a merged HF model that transformers and vLLM load as is.

    The merged model keeps the base's shard layout, tensor names, config.json and tokenizer; weights stream shard by
    shard (memory: one band of rows), and export_manifest.json records sha256 per file and the source run + step.
    Output appears only when complete."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )

    def progress(total: int):
        task = bar.add_task("merging", total=total)
        return lambda n: bar.advance(task, n)

    with bar:
        made = export_run(run_dir, to, out, step=step, base=base, overwrite=overwrite, progress=progress)
    for kind, where in made.items():
        console.print(f"[green]{kind}[/green] → {where}")
