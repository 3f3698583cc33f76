"""The recipe `crosstune plan` plans: loaded like every recipe, except that the checks the planner itself explains
(with options and costs) don't stop it from planning."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from crosstune.recipe import Problem, Recipe, RecipeError, load_recipe
from crosstune.recipe.auto_target import resolve_auto
from crosstune.recipe.checks import check_recipe
from crosstune.untrusted_files import parse_yaml, read_yaml

# Recipe checks the planner itself explains (with options and costs), so they don't stop it from planning.
PLANNED_PATHS = ("backend.jax.mesh", "backend.jax.mesh.tp", "backend.torch.devices")


def load_for_plan(path: Path, overrides: list[str] | None = None) -> Recipe:
    """The recipe, even when its mesh or device counts are wrong (the plan says why and what fits instead)."""

    try:
        return load_recipe(path, overrides)
    except RecipeError as e:
        if any(p.severity == "error" and p.path not in PLANNED_PATHS for p in e.problems) or not path.is_file():
            raise
        refused = e
    data = read_yaml(path)
    for assignment in overrides or []:
        key, _, raw = assignment.partition("=")
        node = data
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise refused
        node[leaf] = parse_yaml(raw, f"--set {key.strip()}")
    base_dir = path.absolute().parent
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError:  # a planned value of the wrong type (`tp: ~`): the plan has nothing to explain
        raise refused from None
    recipe, resolved = resolve_auto(recipe, base_dir)
    problems: list[Problem] = resolved + check_recipe(recipe, base_dir)
    return recipe.located(base_dir, [p for p in problems if p.path not in PLANNED_PATHS])
