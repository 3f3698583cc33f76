"""`crosstune plan RECIPE [--compile [--layers N] | --run [--layers N] | --search] [--json]`: parses and prints; the
work is crosstune.planner (the estimate) and crosstune.plan.driver (XLA's compile of the step, its run on a chip, the
search). Exit 1 when the plan can't run or the compiled step doesn't fit."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from crosstune.errors import CrosstuneError

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)


def plan(
    recipe_file: Path = typer.Argument(..., help="recipe YAML"),
    backend: str = typer.Option(
        None, "--backend", help="jax or torch: whose verdict sets the exit code (default: recipe)"
    ),
    overrides: list[str] = typer.Option(None, "--set", help="override a recipe value: --set backend.jax.mesh.tp=8"),
    compile_: bool = typer.Option(
        False,
        "--compile",
        help="compile the jax train step for the hardware's TPU topology (needs libtpu: make "
        "tpu-compile-env; no TPU, no weights) and show XLA's memory per device, flops and roofline. Full depth: a "
        "~10 min, ~17 GB pre-flight for a 31B model",
    ),
    layers: int = typer.Option(
        None,
        "--layers",
        help="with --compile or --run: only the first N decoder layers (memory and time are then those layers')",
    ),
    run: bool = typer.Option(
        False,
        "--run",
        help="run the jax train step on the attached TPU and time it (weights made on the chip, a synthetic "
        "packed batch; the mesh fitted to the attached chips as `hardware: auto` does): step time, tokens/s, MFU, "
        "peak HBM and compile time measured, beside the planner's time and memory for the same layers, and the "
        "planner's time for the recipe's own hardware",
    ),
    steps: int = typer.Option(8, "--steps", help="with --run: micro-steps timed (after 2 warm-up steps)"),
    profile: Path = typer.Option(
        None, "--profile", help="with --run: a JAX profiler trace of two timed steps into this folder (XProf)"
    ),
    search: bool = typer.Option(
        False,
        "--search",
        help="search remat (none / dots / full), attention (splash / dense), rows per device, the fsdp × tp "
        "meshes and the layers unrolled or scanned (backend.jax.scan_layers) for the fastest step that fits, by "
        "XLA's compiles for the TPU topology (needs libtpu): candidates screened at two shallow depths, the best "
        "compiled at full depth; prints the frontier and the --set lines of each",
    ),
    max_compiles: int = typer.Option(
        9,
        "--max-compiles",
        help="with --search: at most this many compiles (2 per screened candidate, 1 "
        "per finalist; a 31B full-depth compile is ~10-30 min and ~17 GB)",
    ),
    cache: Path = typer.Option(
        None,
        "--cache",
        help="with --search: keep each compile's result in this folder and reuse it when the recipe, "
        "the --set lines, the depth and the jax step's code are the same (a search resumes where it stopped)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object (bytes per device) instead of tables"),
) -> None:
    """Check a recipe against its hardware before allocating anything: heads vs tensor parallelism, fsdp × tp vs
    devices, and per-device memory (weights, LoRA, optimizer, activations with/without remat, logits) vs HBM;
    --compile checks it with XLA itself, --run on the attached TPU."""
    from crosstune.planner.planned_recipe import load_for_plan

    _check_options(backend, compile_, layers, search, run, steps, profile)
    overrides = list(overrides or [])
    if run:
        raise typer.Exit(_run(recipe_file, overrides, layers, steps, profile, as_json))
    recipe = load_for_plan(recipe_file, overrides)
    if search:
        raise typer.Exit(_search(recipe_file, overrides, recipe, max_compiles, as_json, cache))
    raise typer.Exit(_plan(recipe_file, overrides, recipe, backend, compile_, layers, as_json))


def _check_options(backend, compile_: bool, layers, search: bool, run: bool, steps: int, profile) -> None:
    """The options that go together, and the backend's name (else the recipe's backend was planned: "plan ok")."""
    from crosstune.recipe.schema import BACKEND_NAMES

    if backend is not None and backend not in BACKEND_NAMES:
        raise CrosstuneError(f"--backend {backend!r}: one of {', '.join(BACKEND_NAMES)}")
    if layers is not None and not (compile_ or run):
        raise CrosstuneError("--layers goes with --compile or --run: add one, or leave out --layers")
    if search and (compile_ or run or layers is not None):
        raise CrosstuneError("--search compiles by itself: leave out --compile, --run and --layers")
    if run and compile_:
        raise CrosstuneError("--run compiles on the chip itself: leave out --compile")
    if (steps != 8 or profile is not None) and not run:
        raise CrosstuneError("--steps and --profile go with --run")


def _plan(recipe_file: Path, overrides: list[str], recipe, backend, compile_: bool, layers, as_json: bool) -> int:
    """The planner's verdict, and with --compile XLA's beside it; the exit code."""
    from crosstune.planner import plan_recipe
    from crosstune.planner.view import plan_json, render_compiled, render_plan

    result = plan_recipe(recipe, "jax" if compile_ else backend)
    refused = [b for b in result.blockers if b not in result.memory_blockers] if compile_ else result.blockers
    if not compile_ or refused:
        if as_json:
            print(json.dumps(plan_json(result), indent=1))
        else:
            render_plan(result, console)
            if compile_:
                console.print("[red]not compiled[/red]: the plan is refused before compiling", highlight=False)
        return 1 if refused else 0
    from crosstune.plan.driver import compiled_plan

    report = compiled_plan(recipe_file, overrides, recipe, result, layers)
    if as_json:
        print(json.dumps(report, indent=1))
    else:
        render_plan(result, console)
        render_compiled(report, console)
    return 0 if report["fits"] else 1


def _run(recipe_file: Path, overrides: list[str], layers, steps: int, profile, as_json: bool) -> int:
    """`plan --run`, its progress on stderr; the work is crosstune.plan.driver.measured_plan."""
    from crosstune.plan.driver import measured_plan
    from crosstune.planner.view import render_measured

    report = measured_plan(
        recipe_file,
        overrides,
        layers,
        steps,
        profile,
        say=lambda line: err.print(f"[cyan]{line}[/cyan]", highlight=False),
    )
    if as_json:
        print(json.dumps(report, indent=1))
    else:
        render_measured(report, console)
    return 0


def _search(recipe_file: Path, overrides: list[str], recipe, max_compiles: int, as_json: bool, cache) -> int:
    """`plan --search` with rich progress on stderr; the search itself is crosstune.plan.driver.search_plan."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from crosstune.plan.driver import search_plan
    from crosstune.planner.search_report import search_json
    from crosstune.planner.view import render_search

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err, transient=True
    ) as bar:
        task = bar.add_task(f"planning {recipe.name}", total=None)
        found, hw = search_plan(
            recipe_file,
            overrides,
            recipe,
            max_compiles,
            cache,
            status=lambda line: bar.update(task, description=line),
            say=lambda line: bar.console.print(f"[cyan]{line}[/cyan]", highlight=False),
        )
    if as_json:
        print(json.dumps(search_json(found, recipe, hw), indent=1))
    else:
        render_search(found, recipe, hw, console)
    return 0 if found.winner is not None else 1
