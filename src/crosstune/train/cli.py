"""`crosstune train RECIPE --backend torch|jax`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

console = Console(soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("train")(train)


def train(
    recipe_file: Path = typer.Argument(..., help="recipe YAML"),
    backend: str = typer.Option(None, "--backend", help="torch (TRL+PEFT+FSDP2) or jax (Tunix+Qwix); default: recipe"),
    run_dir: Path = typer.Option(None, help="run directory (default: <output_dir>/<name>-<backend>)"),
    resume: bool = typer.Option(False, "--resume", help="continue from the run directory's latest checkpoint"),
    overrides: list[str] = typer.Option(None, "--set", help="override a recipe value: --set train.max_steps=10"),
) -> None:
    """Train LoRA on the recipe's prepared data with either backend; same metrics, same run-directory layout."""
    from crosstune.recipe import RecipeError, load_recipe
    from crosstune.train.backend import get_backend
    from crosstune.train.rundir import default_run_dir

    try:
        recipe = load_recipe(recipe_file, overrides)
    except RecipeError as e:
        console.print(str(e), markup=False, highlight=False)
        raise typer.Exit(1) from None
    name = backend or recipe.backend.default
    try:
        impl = get_backend(name)
    except KeyError as e:
        console.print(f"[red]{e.args[0]}[/red]")
        raise typer.Exit(2) from None
    target = run_dir or default_run_dir(recipe, name)
    result = impl.train(recipe, target, resume=resume)
    console.print(
        f"[green]done[/green]: {result.steps} steps, final loss {result.final_loss:.4f}, run dir {result.run_dir}"
    )
