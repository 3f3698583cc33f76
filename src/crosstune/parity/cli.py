"""`crosstune parity RECIPE`: the parity check's command; the comparison is crosstune.parity.check, its table
crosstune.parity.table."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from crosstune.parity import check as parity_check
from crosstune.parity.table import report_table

console = Console(soft_wrap=True, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("parity")(parity)


def parity(
    recipe_file: Path = typer.Argument(..., help="recipe YAML (its model, LoRA, data, optimizer and jax mesh)"),
    overrides: list[str] = typer.Option(None, "--set", help="override a recipe value: --set lora.rank=4"),
    seed: int = typer.Option(0, help="seed of the random LoRA weights both backends get"),
    precision: str = typer.Option("fp32", help="fp32 (tight tolerances) or bf16 (both bases bf16; loss within 4·2^-8)"),
    dropout: float = typer.Option(None, help="also check LoRA dropout p (e.g. the recipe's) over sampled masks"),
    dropout_samples: int = typer.Option(8, help="dropout draws per backend for the sampled check"),
) -> None:
    """Check that torch (TRL+PEFT) and jax (Tunix+Qwix) compute the same training step on the recipe: same loss,
    same LoRA gradients, same loss after one AdamW step, over the recipe's gradient accumulation, activation
    recompute and jax mesh. LoRA dropout is checked statistically (different RNGs). Exits non-zero when out of
    tolerance."""
    with console.status("parity") as status:
        report = parity_check.run_parity(
            recipe_file,
            overrides,
            seed,
            log=lambda msg: status.update(f"parity: {msg}"),
            precision=precision,
            dropout=dropout,
            dropout_samples=dropout_samples,
        )
    console.print(report_table(report))
    if not report.ok:
        console.print("[red]parity FAILED[/red]: the backends disagree beyond tolerance")
        raise typer.Exit(1)
    console.print("[green]parity ok[/green]")
