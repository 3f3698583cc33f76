"""`crosstune plan RECIPE [--compile [--layers N]] [--json]`: the planner's verdict, and with --compile XLA's own.

The planner (crosstune.planner) estimates memory per device from shapes; --compile asks the compiler: the recipe's
real jax train step compiled ahead of time for its hardware's TPU topology (crosstune.train.jax.compile, in a
child process with libtpu), XLA's per-device memory next to the planner's, the compiled flops and bytes and the
roofline they imply. A mesh the planner refuses (heads tp can't split, device count) is refused before compiling;
a memory verdict is the compiler's to give. Exit 1 when the plan can't run or the compiled step doesn't fit.
"""

from __future__ import annotations

import dataclasses
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
# crosstune.train.jax's modules that make the compiled program or read it (a --search cache entry's code)
STEP_CODE = ("aot", "attention", "logits", "lora", "model", "remat", "step", "trainer")
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
    search: bool = typer.Option(
        False,
        "--search",
        help="search remat (none / dots / full), attention (splash / dense), rows per device and the fsdp × tp "
        "meshes for the fastest step that fits, by XLA's compiles for the TPU topology (needs libtpu): candidates "
        "screened at two shallow depths, the best compiled at full depth; prints the frontier and the --set lines "
        "of each",
    ),  # fmt: skip
    max_compiles: int = typer.Option(
        9,
        "--max-compiles",
        min=3,
        help="with --search: at most this many compiles (2 per screened candidate, 1 "
        "per finalist; a 31B full-depth compile is ~10-30 min and ~17 GB)",
    ),  # fmt: skip
    cache: Path = typer.Option(
        None,
        "--cache",
        help="with --search: keep each compile's result in this folder and reuse it when the recipe, "
        "the --set lines, the depth and the jax step's code are the same (a search resumes where it stopped)",
    ),  # fmt: skip
    as_json: bool = typer.Option(False, "--json", help="print one JSON object (bytes per device) instead of tables"),
) -> None:
    """Check a recipe against its hardware before allocating anything: heads vs tensor parallelism, fsdp × tp vs
    devices, and per-device memory (weights, LoRA, optimizer, activations with/without remat, logits) vs HBM;
    --compile checks it with XLA itself."""
    from crosstune.train.backend import BACKENDS

    if backend is not None and backend not in BACKENDS:  # else the recipe's backend was planned, and "plan ok"
        raise CrosstuneError(f"--backend {backend!r}: one of {', '.join(BACKENDS)}")
    if layers is not None and not compile_:
        err.print("error: --layers goes with --compile", highlight=False)
        raise typer.Exit(2)
    try:
        recipe = load_for_plan(recipe_file, overrides)
    except RecipeError as e:
        err.print(str(e), markup=False, highlight=False)
        raise typer.Exit(2) from None
    if search:
        if compile_ or layers is not None:
            err.print("error: --search compiles by itself: leave out --compile and --layers", highlight=False)
            raise typer.Exit(2)
        raise typer.Exit(run_plan_search(recipe_file, list(overrides or []), recipe, max_compiles, as_json, cache))
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


def compile_key(recipe_file: Path, overrides: list[str], layers: int | None) -> str:
    """What a compile's result depends on: the recipe as the --set lines resolve it (so a recipe that took a
    candidate's settings finds that candidate's compiles), the depth, and the code of the jax step and of its
    analysis (STEP_CODE)."""
    import hashlib

    import crosstune.train.jax as jax_backend

    code = [Path(jax_backend.__file__).parent / f"{name}.py" for name in STEP_CODE]
    resolved = load_for_plan(recipe_file, overrides).model_dump(mode="json")
    parts = [json.dumps([resolved, layers], sort_keys=True)]
    parts += [p.read_text(encoding="utf-8") for p in code]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def run_plan_search(
    recipe_file: Path, overrides: list[str], recipe, max_compiles: int, as_json: bool, cache: Path | None = None
) -> int:
    """`plan --search`: crosstune.planner.search with the compiler in a child process, rich progress on stderr;
    with `cache`, each compile's CompiledStep is kept as <cache>/<compile_key>.json and reused."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from crosstune.fsutil import atomic_write_text
    from crosstune.planner.compiled import CompiledStep
    from crosstune.planner.search import Candidate, run_search, search_json
    from crosstune.planner.view import render_search
    from crosstune.train.jax.compile import compile_step, find_libtpu
    from crosstune.train.jax.remat import remat_mode
    from crosstune.train.steps import accumulation

    hw = HARDWARE[recipe.hardware]
    if hw.tpu_topology is None:
        err.print(f"[red]error:[/red] hardware {hw.name}: --search compiles for a TPU topology", highlight=False)
        return 1
    try:
        find_libtpu()
    except CrosstuneError as e:
        err.print(f"[red]error:[/red] {e}", highlight=False)
        return 1
    spec = plan_recipe(recipe, "jax").spec
    m, t = recipe.backend.jax.mesh, recipe.train
    rows = t.per_device_batch_size * m.fsdp * accumulation(t, m.fsdp)
    baseline = Candidate(remat_mode(t), recipe.backend.jax.attention, t.per_device_batch_size, m.fsdp, m.tp,
                         accumulation(t, m.fsdp))  # fmt: skip

    def memory(c: Candidate):
        return plan_recipe(load_for_plan(recipe_file, overrides + c.overrides(recipe)), "jax").jax_memory

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err,
                  transient=True) as bar:  # fmt: skip
        task = bar.add_task(f"planning {recipe.name}", total=None)
        done = [0]

        def compile_one(extra: list[str], depth: int | None):
            done[0] += 1
            what = f"compile {done[0]}/{max_compiles} ({'full depth' if depth is None else f'{depth} layers'})"
            kept = None if cache is None else cache / f"{compile_key(recipe_file, overrides + extra, depth)}.json"
            if kept is not None and kept.is_file():
                bar.console.print(f"  {what}: reused {kept}", highlight=False)
                return CompiledStep.from_dict(json.loads(kept.read_text(encoding="utf-8")))
            bar.update(task, description=what)
            echo = lambda line: bar.update(task, description=f"{what}: {line.strip()[:90]}")  # noqa: E731
            step = compile_step(recipe_file, overrides + extra, depth, hw.name.removeprefix("tpu-"), echo=echo)
            if kept is not None:
                kept.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(kept, json.dumps(dataclasses.asdict(step), indent=1))
            return step

        def say(line: str) -> None:
            bar.console.print(f"[cyan]{line}[/cyan]", highlight=False)

        try:
            found = run_search(recipe, spec, hw, rows, memory, compile_one, max_compiles=max_compiles,
                               baseline=baseline, progress=say)  # fmt: skip
        except CrosstuneError as e:
            err.print(f"[red]error:[/red] {e}", highlight=False)
            return 1
    if as_json:
        print(json.dumps(search_json(found, recipe, hw), indent=1))
    else:
        render_search(found, recipe, hw, console)
    return 0 if found.winner is not None else 1
