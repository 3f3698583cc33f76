"""Recipes: the YAML schema, loading with located errors, and consistency checks."""

from crosstune.recipe.findings import Problem, RecipeError
from crosstune.recipe.load import (
    load_recipe,
    model_path,
    model_snapshot,
    parse_recipe,
    recipe_hash,
    resolve_path,
)
from crosstune.recipe.paths import UnlocatedRecipeError
from crosstune.recipe.schema import Recipe

__all__ = [
    "Problem",
    "Recipe",
    "RecipeError",
    "load_recipe",
    "model_path",
    "model_snapshot",
    "parse_recipe",
    "recipe_hash",
    "resolve_path",
    "UnlocatedRecipeError",
]
