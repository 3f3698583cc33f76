"""Which recipe paths name hub ids: `model.path` and a data source's `path` may be a folder or file, or an owner/name
id of the hub (crosstune.hub resolves it). Something on disk at that path wins; a revision (or a hub dataset's
config or split) says hub."""

from __future__ import annotations

from pathlib import Path

from crosstune.hub import is_hub_id
from crosstune.recipe.data_schema import DataSource
from crosstune.recipe.paths import UnlocatedRecipeError, recipe_path


def _on_disk(value: str, base_dir: Path | None) -> bool:
    """Something at the recipe path `value` (a recipe from no file has nothing on disk at a relative path)."""
    try:
        return recipe_path(value, base_dir).exists()
    except UnlocatedRecipeError:
        return False


def hub_model_id(path: str | None, revision: str | None, base_dir: Path | None) -> str | None:
    """`model.path` when it names a hub model (None: a local folder, or unset)."""
    if path is None or not is_hub_id(path):
        return None
    return path if revision is not None or not _on_disk(path, base_dir) else None


def hub_dataset_id(source: DataSource, base_dir: Path | None) -> str | None:
    """A data source's path when it names a hub dataset (None: files on disk)."""
    if source.format == "hub":
        return source.path
    if source.format != "auto" or not is_hub_id(source.path):
        return None
    return source.path if source.names_hub_fields or not _on_disk(source.path, base_dir) else None
