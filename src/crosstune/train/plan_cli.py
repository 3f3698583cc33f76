"""`crosstune plan RECIPE [--compile [--layers N]] [--json]`: the planner's verdict, and with --compile XLA's own.

The planner (crosstune.planner) estimates memory per device from shapes; --compile asks the compiler: the recipe's
real jax train step compiled ahead of time for its hardware's TPU topology (crosstune.train.jax.compile, in a
child process with libtpu), XLA's per-device memory next to the planner's, the compiled flops and bytes and the
roofline they imply. A mesh the planner refuses (heads tp can't split, device count) is refused before compiling;
a memory verdict is the compiler's to give. Exit 1 when the plan can't run or the compiled step doesn't fit.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from crosstune.errors import CrosstuneError
from crosstune.hardware import HARDWARE
from crosstune.planner import plan_recipe
from crosstune.planner.compiled import compile_report, with_layers
from crosstune.planner.planned_recipe import load_for_plan
from crosstune.planner.view import plan_json, render_compiled, render_plan
from crosstune.recipe import RecipeError

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
    ),  # fmt: skip
    layers: int = typer.Option(
        None,
        "--layers",
        help="with --compile: only the first N decoder layers (a quick smoke check; memory is then not the model's)",
    ),  # fmt: skip
    as_json: bool = typer.Option(False, "--json", help="print one JSON object (bytes per device) instead of tables"),
) -> None:
    """Check a recipe against its hardware before allocating anything: heads vs tensor parallelism, fsdp × tp vs
    devices, and per-device memory (weights, LoRA, optimizer, activations with/without remat, logits) vs HBM;
    --compile checks it with XLA itself."""
    if layers is not None and not compile_:
        err.print("error: --layers goes with --compile", highlight=False)
        raise typer.Exit(2)
    try:
        recipe = load_for_plan(recipe_file, overrides)
    except RecipeError as e:
        err.print(str(e), markup=False, highlight=False)
        raise typer.Exit(2) from None
    result = plan_recipe(recipe, "jax" if compile_ else backend)
    refused = [b for b in result.blockers if b not in result.memory_blockers] if compile_ else result.blockers
    if not compile_ or refused:
        if as_json:
            print(json.dumps(plan_json(result), indent=1))
        else:
            render_plan(result, console)
            if compile_:
                console.print("[red]not compiled[/red]: the plan is refused before compiling", highlight=False)
        raise typer.Exit(1 if refused else 0)
    hw = HARDWARE[recipe.hardware]
    try:
        if hw.tpu_topology is None:
            tpus = ", ".join(h.name for h in HARDWARE.values() if h.tpu_topology)
            raise CrosstuneError(f"hardware {hw.name}: --compile compiles for a TPU topology ({tpus})")
        short = with_layers(result.spec, layers) if layers is not None else result.spec
        from crosstune.train.jax.compile import compile_step

        step = compile_step(recipe_file, list(overrides or []), layers, accelerator=hw.name.removeprefix("tpu-"))
    except (CrosstuneError, ValueError) as e:
        err.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(1) from None
    report = compile_report(plan_recipe(recipe, "jax", spec=short), step)
    if as_json:
        print(json.dumps(report, indent=1))
    else:
        render_plan(result, console)
        render_compiled(report, console)
    raise typer.Exit(0 if report["fits"] else 1)
