"""`crosstune plan RECIPE`: the planner's verdict as rich tables; exit 1 when the plan can't run."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from crosstune.planner.estimate import USABLE_FRACTION, Memory, Plan, plan_recipe
from crosstune.recipe import Problem, Recipe, RecipeError, load_recipe
from crosstune.recipe.checks import check_recipe

console = Console(soft_wrap=True)
# Recipe checks the planner itself explains (with options and costs), so they don't stop it from planning.
PLANNED_PATHS = ("backend.jax.mesh", "backend.jax.mesh.tp", "backend.torch.devices")


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)


def load_for_plan(path: Path, overrides: list[str] | None = None) -> Recipe:
    """The recipe, even when its mesh or device counts are wrong (the plan says why and what fits instead)."""
    import yaml

    try:
        return load_recipe(path, overrides)
    except RecipeError as e:
        if any(p.severity == "error" and p.path not in PLANNED_PATHS for p in e.problems) or not path.is_file():
            raise
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for assignment in overrides or []:
        key, _, raw = assignment.partition("=")
        node = data
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(raw)
    base_dir = path.absolute().parent
    recipe = Recipe.model_validate(data)
    problems: list[Problem] = check_recipe(recipe, base_dir)
    return recipe.located(base_dir, [p for p in problems if p.path not in PLANNED_PATHS])


def _gb(x: float | None) -> str:
    return "–" if x is None else f"{x:,.1f}"


def render_plan(plan: Plan, out: Console | None = None) -> None:
    """The planner's tables: model and heads vs tp, JAX mesh options, memory per device for both backends."""
    out = out or console
    spec, hw = plan.spec, plan.hardware
    fsdp, tp = plan.jax_mesh
    heads = Table(title=f"{spec.name} on {hw.name} ({hw.devices} × {hw.chip.name}, {_gb(hw.chip.hbm_gb)} GB HBM)")
    for col in ("layer type", "layers", "query heads", "KV heads", "head_dim", f"tp={tp}"):
        heads.add_column(col)
    for name in dict.fromkeys(spec.layer_types):
        a = spec.attention[name]
        split = [n for n in (a.num_heads, a.num_kv_heads) if n % tp and n != 1]
        verdict = "[green]splits[/green]" if not split else f"[red]can't split {', '.join(map(str, split))}[/red]"
        heads.add_row(
            name, str(len(spec.layers_of(name))), str(a.num_heads), str(a.num_kv_heads), str(a.head_dim), verdict
        )
    out.print(heads)

    options = Table(title="JAX meshes over all devices (fsdp × tp), memory per device")
    for col in ("fsdp", "tp", "verdict", "kept whole over tp", "GB / device"):
        options.add_column(col)
    for o in plan.jax_options:
        chosen = " ◀ recipe" if (o.fsdp, o.tp) == (fsdp, tp) else ""
        color = {"ok": "green", "out of memory": "red"}.get(o.verdict, "yellow")
        options.add_row(
            str(o.fsdp),
            str(o.tp),
            f"[{color}]{o.verdict}[/{color}]{chosen}",
            ", ".join(o.replicated) or "–",
            _gb(o.memory.total),
        )
    out.print(options)

    memory = Table(title=f"Memory per device, GB (fits: ≤ {USABLE_FRACTION:.0%} of HBM)")
    memory.add_column("")
    columns: list[tuple[str, Memory]] = [(f"jax fsdp={fsdp} tp={tp}", plan.jax_memory)]
    if plan.torch_memory is not None:
        columns.append((f"torch {plan.torch_devices} device(s)", plan.torch_memory))
    for title, _ in columns:
        memory.add_column(title, justify="right")
    rows = [
        ("base weights", lambda m: m.base),
        ("LoRA + grads + AdamW", lambda m: m.lora),
        ("activations, remat", lambda m: m.activations_remat),
        ("activations, no remat", lambda m: m.activations_no_remat),
        ("activations, selective (torch)", lambda m: m.activations_selective),
        (f"logits ({spec.vocab_size:,} vocab)", lambda m: m.logits),
        ("total (as configured)", lambda m: m.total),
        ("HBM", lambda m: m.hbm),
    ]
    for label, get in rows:
        memory.add_row(label, *(_gb(get(m)) for _, m in columns))
    memory.add_row("fits", *("[green]yes[/green]" if m.fits else "[red]no[/red]" for _, m in columns))
    out.print(memory)
    for note in plan.notes:
        out.print(f"[yellow]note[/yellow]: {note}")
    if plan.ok:
        out.print(f"[green]plan ok[/green] for --backend {plan.backend}")
    for b in plan.blockers:
        out.print(f"[red]can't run[/red] (--backend {plan.backend}): {b}", markup=True, highlight=False)


def plan(
    recipe_file: Path = typer.Argument(..., help="recipe YAML"),
    backend: str = typer.Option(
        None, "--backend", help="jax or torch: whose verdict sets the exit code (default: recipe)"
    ),
    overrides: list[str] = typer.Option(None, "--set", help="override a recipe value: --set backend.jax.mesh.tp=8"),
) -> None:
    """Check a recipe against its hardware before allocating anything: heads vs tensor parallelism, fsdp × tp vs
    devices, and per-device memory (weights, LoRA, optimizer, activations with/without remat, logits) vs HBM."""

    try:
        recipe = load_for_plan(recipe_file, overrides)
    except RecipeError as e:
        console.print(str(e), markup=False, highlight=False)
        raise typer.Exit(2) from None
    result = plan_recipe(recipe, backend)
    render_plan(result)
    if not result.ok:
        raise typer.Exit(1)
