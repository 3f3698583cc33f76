"""The one rule for a path written in a recipe: `~` expanded, an absolute path as it is, a relative one against the
recipe file's folder (`Recipe.base_dir`), never the working directory; a relative path in a recipe that came from no
file is an UnlocatedRecipeError. A caller that only asks whether something is on disk (a check of a recipe text)
catches that error, and says so where it does. Whether a path is a hub id is not asked of the disk at all: it is
what is written, hf://OWNER/NAME (crosstune.hub, crosstune.recipe.hub_ids)."""

from __future__ import annotations

from pathlib import Path

from crosstune.errors import CrosstuneError


class UnlocatedRecipeError(CrosstuneError, ValueError):
    """A relative path in a recipe that was not loaded from a file, so nothing says what it is relative to."""


def recipe_path(value: str, base_dir: Path | None, recipe_name: str = "") -> Path:
    """`value` (a recipe's path) as a path: absolute as written, else under `base_dir`."""
    p = Path(value).expanduser()
    if p.is_absolute():
        return p
    if base_dir is None:
        named = f"recipe {recipe_name!r}: " if recipe_name else ""
        raise UnlocatedRecipeError(
            f"{named}relative path {value!r} but the recipe was not loaded from a file: load it with "
            "load_recipe(FILE), give parse_recipe a base_dir, or use an absolute path"
        )
    return base_dir / p
