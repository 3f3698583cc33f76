"""`crosstune demo`: the pipeline on the embedded default."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from crosstune.demo import stages
from crosstune.demo.context import DEFAULT_EVAL, DEFAULT_TRAIN, DemoContext, claim_output_folder, console
from crosstune.demo.evaluation import comparison_table
from crosstune.recipes import shipped_recipe


def run_demo(
    out: Path,
    recipe_file: Path,
    seed: int = 0,
    n_train: int = DEFAULT_TRAIN,
    n_eval: int = DEFAULT_EVAL,
    steps: int | None = None,
    cache_root: Path | None = None,
    base_steps: int | None = None,
) -> DemoContext:
    claim_output_folder(out)
    ctx = DemoContext(out, recipe_file, seed, n_train, n_eval, steps, cache_root, base_steps)
    for i, (title, fn) in enumerate(stages.STAGES, 1):
        console.rule(f"[bold]{i}/{len(stages.STAGES)} {title}")
        t0 = time.perf_counter()
        message = fn(ctx)
        console.print(f"   {message}  [dim]({time.perf_counter() - t0:.1f} s)[/dim]")
    table = Table(title="What the demo made")
    for col in ("what", "where", "note"):
        table.add_column(col, overflow="fold")
    for what, where, note in ctx.made:
        table.add_row(what, str(where), note)
    console.print(table)
    if ctx.scores:
        console.print(comparison_table(ctx.scores))
    if ctx.report is not None:
        console.print(f"[bold]Report:[/bold] {ctx.report}", highlight=False)
    return ctx


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    out: Path = typer.Option(
        Path("demo-out"), help="folder for everything the demo makes: new or empty, or an earlier demo's (emptied)"
    ),
    recipe: Path = typer.Option(None, help="the recipe to run [default: the shipped demo-cpu.yaml]"),
    seed: int = typer.Option(0, help="seed for the held-out corpus"),
    n_train: int = typer.Option(DEFAULT_TRAIN, help="synthetic training records for the LoRA"),
    n_eval: int = typer.Option(DEFAULT_EVAL, help="held-out evaluation problems"),
    steps: int = typer.Option(None, help="LoRA steps on each backend (default: the recipe's train.max_steps, 180)"),
    cache: Path = typer.Option(None, help="pretrained-base cache (default: $CROSSTUNE_CACHE or ~/.cache/crosstune)"),
    base_steps: int = typer.Option(
        None, help="pretraining steps of the base (default 1200; another count caches another base)"
    ),
) -> None:
    """Run the pipeline end to end on this CPU: a pretrained small Gemma 4, LoRA on both backends, pass@k gain."""
    recipe = recipe or shipped_recipe("demo-cpu.yaml")
    cache_root = cache.resolve() / "pretrained" if cache else None
    run_demo(out.resolve(), recipe, seed, n_train, n_eval, steps=steps, cache_root=cache_root, base_steps=base_steps)
