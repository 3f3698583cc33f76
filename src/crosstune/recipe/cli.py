"""`crosstune recipe ...` commands."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml
from rich.console import Console

from crosstune.recipe import RecipeError, load_recipe

recipe_app = typer.Typer(help="Validate and inspect recipes (the YAML that drives every stage).", no_args_is_help=True)
console = Console(soft_wrap=True)

OverrideOpt = typer.Option(None, "--set", help="override a value: --set train.max_steps=10 (repeatable)")


def register(app: typer.Typer) -> None:
    app.add_typer(recipe_app, name="recipe")


@recipe_app.command("validate")
def validate(
    files: list[Path] = typer.Argument(..., help="recipe YAML file(s)"),
    overrides: list[str] = OverrideOpt,
) -> None:
    """Check recipes: unknown keys, wrong types, impossible meshes and hardware, each with its YAML path."""

    failed = 0
    for f in files:
        try:
            recipe = load_recipe(f, overrides)
        except RecipeError as e:
            failed += 1
            console.print(f"[red]✗[/red] {f}: {sum(p.severity == 'error' for p in e.problems)} problem(s)")
            for p in e.problems:
                console.print("  " + p.render(f), markup=False, highlight=False)
            continue
        console.print(f"[green]✓[/green] {f}: recipe {recipe.name!r} is valid")
        for p in recipe.warnings:
            console.print("  " + p.render(f), markup=False, highlight=False)
    raise typer.Exit(1 if failed else 0)


@recipe_app.command("show")
def show(file: Path = typer.Argument(..., help="recipe YAML file"), overrides: list[str] = OverrideOpt) -> None:
    """Print the resolved recipe: every default filled in, as the stages will read it."""

    recipe = load_recipe(file, overrides)
    console.print(yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False), markup=False, highlight=False)
