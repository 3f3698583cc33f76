"""`crosstune recipe ...` commands."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from crosstune.emit import yaml_text
from crosstune.errors import InputError
from crosstune.hardware import HARDWARE
from crosstune.recipe import RecipeError, load_recipe

recipe_app = typer.Typer(
    help="Validate and inspect recipes (the YAML that drives every stage); import an Axolotl, TRL or LLaMA-Factory "
    "config, export the torch leg back to one.",
    no_args_is_help=True,
)
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
    console.print(yaml_text(recipe.model_dump(mode="json")), markup=False, highlight=False)


@recipe_app.command("schema")
def schema(section: str = typer.Argument(None, help="only this top-level section, e.g. train or eval")) -> None:
    """List every recipe key by its YAML path: its type, default, bounds and what it means, as the schema says."""
    from rich.table import Table

    from crosstune.recipe.reference import keys, sections

    found = keys(section)
    if not found:
        raise InputError(f"no recipe section {section!r}: one of {', '.join(sections())}")
    table = Table(title=f"recipe keys{f' ({section})' if section else ''}")
    table.add_column("key", no_wrap=True)
    for header in ("type", "default", "what it is"):
        table.add_column(header, overflow="fold")
    for key in found:
        table.add_row(key.path, key.kind, key.default, key.about)
    console.print(table)


@recipe_app.command("import")
def import_(
    config: Path = typer.Argument(..., help="an Axolotl YAML, a `trl sft --config` YAML or a LLaMA-Factory YAML"),
    out: Path = typer.Option(..., "--out", help="the recipe file to write (replaces only a recipe `import` wrote)"),
    fmt: str | None = typer.Option(None, "--from", help="axolotl, trl or llamafactory (default: told by the keys)"),
    hardware: str | None = typer.Option(
        None,
        "--hardware",
        help="the target the study runs on (tpu-v5p-8, 2xh100, ...): a TPU gets the jax "
        "backend on a mesh of its chips, a GPU box the torch backend; default cpu",
    ),
    source_devices: int | None = typer.Option(
        None,
        "--source-devices",
        help="the GPUs the config trained on, where it doesn't say (its global batch is "
        "rows per device × accumulation × these); default: what the config says, else 1",
    ),
    global_batch: int | None = typer.Option(
        None,
        "--global-batch",
        help="rows per optimizer step, instead of the config's (a multiple of the target's data-parallel devices)",
    ),
    name: str | None = typer.Option(None, "--name", help="the recipe's name (default: the --out file's stem)"),
    strict: bool = typer.Option(False, "--strict", help="exit 1, writing nothing, when any key was not mapped"),
) -> None:
    """Turn a GPU recipe into a crosstune recipe: every key with a crosstune equivalent mapped, every other one
    listed with why and the nearest setting. The written recipe validates; `crosstune plan` and `crosstune study` run
    it on the --hardware target."""
    from crosstune.ownership import check_out
    from crosstune.recipe.convert import FORMATS, IMPORT_HEAD, import_config, write_output

    if fmt is not None and fmt not in FORMATS:
        raise InputError(f"--from {fmt!r}: one of {', '.join(FORMATS)}")
    if hardware is not None and hardware not in HARDWARE:
        raise InputError(f"--hardware {hardware!r}: a named target ({', '.join(HARDWARE)})")
    check_out(out, file=True, inputs=(config,))  # before any work
    done = import_config(
        config, out, fmt=fmt, hardware=hardware, source_devices=source_devices, global_batch=global_batch, name=name
    )
    port = done.port
    for line in [u.render() for u in port.unmapped] + [f"note: {n}" for n in port.notes]:
        console.print("  " + line, markup=False, highlight=False)
    differences = len(port.differences)
    summary = f"{differences} key(s) not mapped, {len(port.unmapped) - differences} ignored"
    if strict and differences:
        console.print(f"[red]✗[/red] {config} ({port.tool}): {summary}; --strict: nothing written")
        raise typer.Exit(1)
    written = write_output(out, done.text, IMPORT_HEAD, inputs=(config,))
    console.print(
        f"[green]✓[/green] wrote {written}: recipe {done.recipe.name!r} from {config} ({port.tool}), "
        f"{summary}; it validates",
        highlight=False,
    )
    for p in done.recipe.warnings:
        console.print("  " + p.render(written), markup=False, highlight=False)
    console.print(
        f"next: crosstune plan {written}   then   crosstune study {written} --backend "
        f"{done.recipe.backend.default} --out BUNDLE",
        markup=False,
        highlight=False,
    )
    if done.recipe.eval.problems is None:
        console.print(
            "  the study skips its eval stage until the recipe names problems: add --set eval.problems=PATH (a "
            "VerilogEval v2 checkout or a problems.txt folder) to that command, or eval.problems to the recipe",
            markup=False,
            highlight=False,
        )


@recipe_app.command("export")
def export(
    recipe_file: Path = typer.Argument(..., help="recipe YAML file"),
    to: str = typer.Option(
        ...,
        "--to",
        help="trl (for `trl sft --config`), axolotl (for `axolotl train`) or llamafactory (for "
        "`llamafactory-cli train`, with its dataset_info.json beside the file)",
    ),
    out: Path | None = typer.Option(None, "--out", help="the config file to write (default: print it)"),
    overrides: list[str] = OverrideOpt,
) -> None:
    """The recipe's torch leg as a config for your own tool, so the GPU side runs with the tool you trust; what the
    tool can't say is listed at the file's head. `recipe import` of the file gives the recipe back."""
    from crosstune.ownership import check_out
    from crosstune.recipe.convert import (
        EXPORT_HEAD,
        FORMATS,
        companion_refusal,
        export_recipe,
        write_companions,
        write_output,
    )

    if to not in FORMATS:
        raise InputError(f"--to {to!r}: one of {', '.join(FORMATS)}")
    if out is not None:
        check_out(out, file=True, inputs=(recipe_file,))  # before any work
    text, missing, files = export_recipe(recipe_file, to, overrides, out)
    if out is None:
        console.print(text, markup=False, highlight=False, end="")
        return
    companion_refusal(files, inputs=(recipe_file,))  # refused before either file is written
    written = write_output(out, text, EXPORT_HEAD, inputs=(recipe_file,))
    beside = write_companions(files, inputs=(recipe_file,))
    for u in missing:
        console.print("  " + u.render(), markup=False, highlight=False)
    also = "".join(f" and {p}" for p in beside)
    console.print(
        f"[green]✓[/green] wrote {written}{also}: the torch leg of {recipe_file} for {to}, "
        f"{len(missing)} setting(s) not carried",
        highlight=False,
    )
