"""The shipped recipes, as package data: `crosstune demo` finds them from a wheel, an editable install or src/.

The repository's top-level recipes/ is a link to this folder, so there is one copy."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from crosstune.errors import InputError


def shipped_recipe(name: str) -> Path:
    """The path of a shipped recipe (wheels install unzipped, so the resource is a real file)."""
    resource = files(__package__) / name
    if not resource.is_file():
        known = sorted(p.name for p in files(__package__).iterdir() if p.name.endswith(".yaml"))
        raise InputError(f"no shipped recipe {name!r}; shipped: {', '.join(known)}")
    return Path(str(resource))
