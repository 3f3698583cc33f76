"""`crosstune train RECIPE --backend torch|jax`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from crosstune.errors import Interrupted
from crosstune.recipe import load_recipe
from crosstune.run.layout import saved_steps
from crosstune.run.rundir import default_run_dir
from crosstune.train.session import TrainingSession

console = Console(soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("train")(train)


def train(
    recipe_file: Path = typer.Argument(..., help="recipe YAML"),
    backend: str = typer.Option(None, "--backend", help="torch (TRL+PEFT+FSDP2) or jax (Tunix+Qwix); default: recipe"),
    run_dir: Path = typer.Option(None, help="run directory (default: <output_dir>/<name>-<backend>)"),
    resume: bool = typer.Option(False, "--resume", help="continue from the run directory's latest checkpoint"),
    overrides: list[str] = typer.Option(None, "--set", help="override a recipe value: --set train.max_steps=10"),
    devices: int = typer.Option(None, "--devices", help="torch: GPUs per node (default: backend.torch.devices)"),
    nodes: int = typer.Option(None, "--nodes", help="torch: machines (default: backend.torch.nodes)"),
    node_rank: int = typer.Option(0, "--node-rank", help="torch, several nodes: this machine's index, 0 = main"),
    main_address: str = typer.Option(None, "--main-address", help="torch, several nodes: HOST[:PORT] of node 0"),
) -> None:
    """Train LoRA on the recipe's prepared data with either backend; same metrics, same run-directory layout."""
    overrides = list(overrides or [])
    overrides += [f"backend.torch.devices={devices}"] if devices else []
    overrides += [f"backend.torch.nodes={nodes}"] if nodes else []
    recipe = load_recipe(recipe_file, overrides)
    name = backend or recipe.backend.default
    target = run_dir or default_run_dir(recipe, name)
    # several-node options exist only where a backend launches its own workers; the backend refuses the others
    launch = {k: v for k, v in {"node_rank": node_rank, "main_address": main_address}.items() if v}
    session = TrainingSession(recipe, name, target, resume=resume, **launch)
    try:
        result = session.run()
    except KeyboardInterrupt:
        again = ["crosstune", "train", str(recipe_file), "--backend", name]
        again += [*(["--run-dir", str(run_dir)] if run_dir else []), *(a for o in overrides for a in ("--set", o))]
        raise Interrupted(interrupted_message(target, recipe.train.checkpoint_every, [*again, "--resume"])) from None
    console.print(
        f"[green]done[/green]: {result.steps} steps, final loss {result.final_loss:.4f}, run dir {result.run_dir}"
    )
    if node_rank == 0:
        console.print(f"merged model or PEFT adapter: crosstune export {result.run_dir} --to merged|adapter --out DIR")


def interrupted_message(run_dir: Path, checkpoint_every: int, resume: list[str]) -> str:
    """What Ctrl-C left behind and the command that continues."""
    from crosstune.emit import shell_words

    steps = saved_steps(run_dir)
    kept = (
        f"{run_dir} keeps the checkpoint of step {steps[-1]} (steps after it are trained again)"
        if steps
        else f"no checkpoint was saved yet (one every {checkpoint_every} steps): --resume starts from step 0"
    )
    return f"interrupted (Ctrl-C): {kept}; resume with: {shell_words(resume)}"
