"""`hardware: auto`: the recipe's target is the one whose devices this process sees (crosstune.hardware's
attached_target), and its jax mesh is fitted to that target's devices when it doesn't fill them, so that a recipe
written for one machine runs on the one at hand without a mesh edit. Each change is a warning the user sees."""

from __future__ import annotations

from pathlib import Path

from crosstune.hardware import AUTO, attached_target
from crosstune.recipe.findings import Problem
from crosstune.recipe.schema import Recipe


def fitted_tp(tp: int, devices: int, shardable: list[int]) -> int:
    """The recipe's tp where it divides the devices and splits every head group, else the largest tp that does."""
    fits = [t for t in shardable if devices % t == 0]
    return tp if tp in fits else max(fits, default=1)


def resolve_auto(recipe: Recipe, base_dir: Path | None) -> tuple[Recipe, list[Problem]]:
    """The recipe with `hardware: auto` replaced by the attached target (and its jax mesh fitted to it), and the
    warnings that say so; a recipe naming its hardware comes back as it is."""
    if recipe.hardware != AUTO:
        return recipe, []
    from crosstune.recipe.checks import model_spec

    target = attached_target()
    notes = [
        Problem(
            "hardware",
            f"auto: the attached devices are {target.name} ({target.devices} × {target.chip.name})",
            severity="warning",
        )
    ]
    update: dict = {"hardware": target.name}
    mesh = recipe.backend.jax.mesh
    if target.chip.platform != "cpu" and mesh.fsdp * mesh.tp != target.devices:
        spec, _ = model_spec(recipe, base_dir)
        shardable = spec.shardable_tps(target.devices) if spec is not None else [1]
        tp = fitted_tp(mesh.tp, target.devices, shardable)
        fitted = mesh.model_copy(update={"fsdp": target.devices // tp, "tp": tp})
        jax = recipe.backend.jax.model_copy(update={"mesh": fitted})
        update["backend"] = recipe.backend.model_copy(update={"jax": jax})
        notes.append(
            Problem(
                "backend.jax.mesh",
                f"fsdp × tp {mesh.fsdp} × {mesh.tp} → {fitted.fsdp} × {fitted.tp} "
                f"for the {target.devices} devices of {target.name}",
                severity="warning",
            )
        )
    serve_tp = recipe.serve.tensor_parallel_size
    if target.chip.platform != "cpu" and serve_tp > target.devices:
        update["serve"] = recipe.serve.model_copy(update={"tensor_parallel_size": target.devices})
        notes.append(
            Problem(
                "serve.tensor_parallel_size",
                f"{serve_tp} → {target.devices}, the devices of {target.name}",
                severity="warning",
            )
        )
    return recipe.model_copy(update=update), notes
