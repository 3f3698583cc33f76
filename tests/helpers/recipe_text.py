"""A minimal valid recipe as text, and the errors a recipe text gets (the recipe tests')."""

from __future__ import annotations

import pytest

from crosstune.recipe import RecipeError, parse_recipe

MINIMAL = """\
name: t
model:
  family: gemma4
  size: 31b
data:
  sources:
    - path: data.jsonl
hardware: tpu-v5p-8
backend:
  jax:
    mesh: {fsdp: 1, tp: 4}
"""


def errors(text: str) -> list[tuple[str, int | None, str]]:
    with pytest.raises(RecipeError) as info:
        parse_recipe(text, "r.yaml")
    return [(p.path, p.line, p.message) for p in info.value.problems if p.severity == "error"]
