"""A recipe's numbers have bounds, all from crosstune.bounds.RECIPE, so a typo or a hostile value is a located error
(a `train.max_steps` of 30 digits validated and went on to plan a run of 10^29 steps)."""

from __future__ import annotations

import types
from typing import Annotated, Union, get_args, get_origin

import annotated_types as at
import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from crosstune.bounds import RECIPE
from crosstune.recipe.load import parse_recipe
from crosstune.recipe.schema import Recipe
from tests.helpers.paths import RECIPES


def _bounds(metadata: list) -> set[str]:
    flat = [inner for m in metadata for inner in (m.metadata if isinstance(m, FieldInfo) else [m])]
    return {type(m).__name__ for m in flat if isinstance(m, at.Gt | at.Ge | at.Lt | at.Le)}


def numbers(model: type[BaseModel] = Recipe, path: str = "") -> dict[str, set[str]]:
    """{YAML path: the kinds of bound (Ge, Gt, Le, Lt) it carries} of every int or float in the recipe schema, a list's
    items included; nested sections are walked (a list of sections as its item's path)."""
    found: dict[str, set[str]] = {}
    for name, field in model.model_fields.items():
        where = f"{path}.{name}" if path else name
        kinds = {field.annotation}
        while kinds:
            kind = kinds.pop()
            origin, args = get_origin(kind), get_args(kind)
            if kind in (int, float):
                found[where] = _bounds(field.metadata)
            elif origin is Annotated and args[0] in (int, float):
                found[where] = _bounds(list(args[1:]))
            elif origin in (list, Union, types.UnionType):
                kinds.update(args)
            elif isinstance(kind, type) and issubclass(kind, BaseModel):
                found.update(numbers(kind, where))
    return found


def test_every_recipe_number_is_bounded_from_the_one_table():
    found = numbers()
    assert len(found) > 40
    assert {path for path, kinds in found.items() if not ({"Ge", "Gt"} & kinds and {"Le", "Lt"} & kinds)} == set()
    assert set(found) == set(RECIPE)  # each bound is one the table declares, and the table declares nothing else


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.max_steps=" + "9" * 30, "error at train.max_steps: Input should be less than or equal to 100000000"),
        ("serve.tensor_parallel_size=0", "error at serve.tensor_parallel_size: Input should be greater than 0"),
        (
            "serve.contexts=[1024, 100000000]",
            "error at serve.contexts[1]: Input should be less than or equal to 10000000",
        ),
        ("train.seed=-1", "error at train.seed: Input should be greater than or equal to 0"),
        ("lora.rank=100000", "error at lora.rank: Input should be less than or equal to 4096"),
    ],
)
def test_a_recipe_number_out_of_bounds_names_its_yaml_path_and_line(override, message):
    recipe = RECIPES / "tiny-cpu.yaml"
    with pytest.raises(Exception) as refused:
        parse_recipe(recipe.read_text(), recipe, [override])
    first = str(refused.value).splitlines()[0]
    assert first.startswith(f"{recipe}:") and message in first, first
