"""Which recipe paths name hub ids: `model.path` and a data source's `path` are paths unless written
`hf://OWNER/NAME` (crosstune.hub's one rule); what is on disk never decides, so a relative path that does not exist
is refused as a path instead of being sent to the hub."""

from __future__ import annotations

from crosstune.hub import hub_id
from crosstune.recipe.data_schema import DataSource


def hub_model_id(path: str | None) -> str | None:
    """`model.path`'s hub id when it is written hf://OWNER/NAME (None: a local folder, or unset): the rule is the
    text."""
    return hub_id(path)


def hub_dataset_id(source: DataSource) -> str | None:
    """A data source's hub id when its path is written hf://OWNER/NAME (None: files on disk)."""
    return hub_id(source.path)
