"""`crosstune demo`: a study per backend of the embedded default, the report, and the table of the demo's figures."""

from __future__ import annotations

from pathlib import Path

import typer

from crosstune.demo.split import DEFAULT_EVAL, DEFAULT_TRAIN


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    out: Path = typer.Option(
        Path("demo-out"), help="the demo's folder: new or empty, or an earlier demo's (resumed: finished stages kept)"
    ),
    recipe: Path = typer.Option(None, help="the recipe to run [default: the shipped demo-cpu.yaml]"),
    seed: int = typer.Option(0, help="seed for the held-out corpus"),
    n_train: int = typer.Option(DEFAULT_TRAIN, help="synthetic training records for the LoRA"),
    n_eval: int = typer.Option(DEFAULT_EVAL, help="held-out evaluation problems"),
    steps: int = typer.Option(None, help="LoRA steps on each backend (default: the recipe's train.max_steps, 180)"),
    cache: Path = typer.Option(None, help="pretrained-base cache (default: $CROSSTUNE_CACHE or ~/.cache/crosstune)"),
    base_steps: int = typer.Option(
        None, help="pretraining steps of the base (default 1200, shipped; another count trains and caches one)"
    ),
) -> None:
    """Run the pipeline end to end on this CPU: a pretrained small Gemma 4, LoRA on both backends, pass@k gain.

    One `crosstune study` per backend (OUT/torch, OUT/jax) of the demo recipe on a held-out corpus (OUT/corpus),
    each with the pretrain stage (the shipped base), the first also with parity and the base's evaluation, then
    `crosstune report` over both bundles (OUT/report). Run it again and every finished stage is kept.
    """
    from rich.console import Console

    from crosstune.demo import figures
    from crosstune.demo.runner import run_demo

    console = Console(soft_wrap=True, highlight=False)
    cache_root = cache.resolve() / "pretrained" if cache else None  # as `crosstune pretrain --cache`
    result = run_demo(
        out,
        recipe,
        seed=seed,
        n_train=n_train,
        n_eval=n_eval,
        steps=steps,
        base_steps=base_steps,
        cache=cache_root,
        console=console,
    )
    console.rule("[bold]the demo", align="left")
    console.print(figures.scores_table(result.scores))
    engines = figures.engines(result.scores)
    one = f"one engine for every model: {engines[0]}" if len(engines) == 1 else f"ENGINES DIFFER: {engines}"
    console.print(one)
    console.print(f"bundles: {', '.join(str(p) for p in result.bundles.values())}")
    console.print(f"[bold]report:[/bold] {result.report}")
    console.print(f"machine: {figures.machine_line(result.host)}; this run took {result.seconds:.0f} s")
