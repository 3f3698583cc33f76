"""`crosstune data ...` commands."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from crosstune.data.bad_input import DataError
from crosstune.data.prepare import prepare_dataset
from crosstune.data.prepared import (
    REPREPARE_HINT,
    data_settings,
    load_tokenizer,
    open_prepared,
    prepared_dir,
    restamp_stats,
    staleness,
    tokenizer_hash,
)
from crosstune.data.stats import dropped_examples, save_stats, skipped_examples, stats_table, summary_line
from crosstune.emit import shell_words
from crosstune.errors import Interrupted
from crosstune.recipe import RecipeError, load_recipe

data_app = typer.Typer(help="Prepare and inspect training data.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")


OverrideOpt = typer.Option(None, "--set", help="override a recipe value: --set data.max_seq_len=1024 (repeatable)")


@data_app.command("prepare")
def prepare(
    recipe: Path = typer.Argument(..., help="recipe YAML whose data: section says what to prepare"),
    overrides: list[str] = OverrideOpt,
    lenient: bool = typer.Option(
        False, "--lenient", help="skip bad records (counted in the stats) instead of stopping"
    ),
    force: bool = typer.Option(False, "--force", help="replace an existing preparation (stale or not)"),
) -> None:
    """Format, tokenize, mask and pack the recipe's data once, into shards both backends train on.

    Writes data.prepared_dir (default: <output_dir>/data/<recipe name>): row shards as .npy (input_ids, loss_mask,
    segment_ids, positions), manifest.json (tokenizer and settings hashes), stats.json and lengths.png.

    A bad record stops it with file:line, field and reason, unless --lenient. An up-to-date preparation is reused;
    a stale one is refused unless --force.
    """
    from rich.progress import Progress

    console = Console()
    try:
        loaded = load_recipe(recipe, overrides)
        with Progress(console=console, transient=True) as bar:
            tasks: dict[str, int] = {}

            def advance(split: str, done: int, total: int) -> None:
                if split not in tasks:
                    tasks[split] = bar.add_task(f"Encoding {split}", total=total)
                bar.update(tasks[split], completed=done)

            prepared = prepare_dataset(loaded, lenient=lenient, force=force, progress=advance)
    except KeyboardInterrupt:
        raise _interrupted(recipe, overrides or [], lenient, force) from None
    _show(console, prepared.stats, prepared.path)
    if prepared.reused:
        console.print("[green]up to date[/green]: reused the existing preparation (--force redoes it)")


@data_app.command("stats")
def stats(
    target: Path = typer.Argument(..., help="a recipe YAML, or a prepared directory (with manifest.json)"),
    overrides: list[str] = OverrideOpt,
) -> None:
    """Show what a preparation holds: records in/out, skips by reason, trained-token fraction, packing efficiency,
    markup problems and token-length percentiles; (re)writes stats.json and lengths.png next to it."""

    console = Console()
    if (target / "manifest.json").is_file():
        prepared, stale = open_prepared(target), []
    else:
        loaded = load_recipe(target, overrides)
        prepared = open_prepared(prepared_dir(loaded))
        stale = staleness(prepared.manifest, data_settings(loaded), tokenizer_hash(load_tokenizer(loaded)))
    figures = prepared.stats  # read once, its figures typed
    if not figures:
        raise DataError(str(prepared.path), "no stats.json", hint=REPREPARE_HINT)
    _show(console, figures, prepared.path)
    save_stats(prepared.path, figures)
    restamp_stats(prepared.path)  # the preparation still proves them its own
    console.print(f"saved {prepared.path / 'stats.json'} and {prepared.path / 'lengths.png'}")
    if stale:
        console.print("[yellow]stale[/yellow] against the recipe: " + "; ".join(stale), highlight=False)


def _show(console, stats: dict, path: Path) -> None:
    """The stats table, the records left out (first few of each kind), the summary line and any warnings."""
    console.print(stats_table(stats, title=f"Prepared data: {path}"))
    for line in skipped_examples(stats):
        console.print(f"  skipped {line}", markup=False, highlight=False)
    for line in dropped_examples(stats):
        console.print(f"  dropped {line}", markup=False, highlight=False)
    for split in stats["splits"]:
        console.print(summary_line(stats, split), markup=False, highlight=False)
    for warning in stats.get("warnings", []):
        console.print(f"[yellow]warning[/yellow]: {escape(warning)}", highlight=False)


def _interrupted(recipe: Path, overrides: list[str], lenient: bool, force: bool) -> BaseException:
    """Ctrl-C: preparation writes a temp folder and renames it into place, so nothing half-made is ever kept."""

    again = ["crosstune", "data", "prepare", str(recipe), *(a for o in overrides for a in ("--set", o))]
    again += ["--lenient"] * lenient + ["--force"] * force
    try:
        where = prepared_dir(load_recipe(recipe, overrides))
    except RecipeError:
        return KeyboardInterrupt()
    kept = "the earlier preparation there is unchanged" if (where / "manifest.json").is_file() else "nothing is kept"
    return Interrupted(f"interrupted (Ctrl-C): nothing was written to {where} ({kept}); rerun: {shell_words(again)}")
