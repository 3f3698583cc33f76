"""Recipes are parsed strictly: YAML a strict loader refuses is refused, values keep the type
the user wrote, numbers are finite, one setting has one key, and a name can't point outside its output folder."""

from pathlib import Path

import pytest
import yaml

from crosstune.recipe import RecipeError, load_recipe, parse_recipe
from crosstune.run.rundir import default_run_dir
from tests.helpers import paths
from tests.helpers.recipe_text import MINIMAL, errors


def test_a_duplicate_key_is_refused_with_both_lines():
    text = MINIMAL + "lora:\n  rank: 8\n  rank: 64\n"
    assert errors(text) == [("", 14, "not valid YAML: duplicate key 'rank' (first on line 13): keep one of them")]
    assert errors(MINIMAL + "name: other\n") == [
        ("", 12, "not valid YAML: duplicate key 'name' (first on line 1): keep one of them")
    ]


def test_yaml_1_2_scalars_no_yes_no_booleans_no_sexagesimal_no_dates():
    from crosstune.untrusted_files import parse_yaml

    assert parse_yaml("a: yes\nb: no\nc: on\nd: 1:30\ne: 2026-01-15\nf: true\ng: 1e-4\nh: 0o17\n", "t.yaml") == {
        "a": "yes",
        "b": "no",
        "c": "on",
        "d": "1:30",
        "e": "2026-01-15",
        "f": True,
        "g": 1e-4,
        "h": 15,
    }
    # PyYAML alone: `packing: yes` was True and `name: no` was False; now the first is refused, the second is text
    (problem,) = errors(MINIMAL.replace("    - path: data.jsonl", "    - path: data.jsonl\n  packing: yes"))
    assert problem == ("data.packing", 8, "Input should be a valid boolean, not 'yes'")
    assert parse_recipe(MINIMAL.replace("name: t", "name: no")).name == "no"
    assert parse_recipe(MINIMAL + "train:\n  learning_rate: 1e-4\n").train.learning_rate == 1e-4


@pytest.mark.parametrize(
    ("extra", "path", "message"),
    [
        ("lora:\n  rank: '8'\n", "lora.rank", "Input should be a valid integer, not '8'"),
        ("lora:\n  rank: 8.0\n", "lora.rank", "Input should be a valid integer, not 8.0"),
        ("lora:\n  rank: true\n", "lora.rank", "Input should be a valid integer, not True"),
        ("lora:\n  dropout: '0.1'\n", "lora.dropout", "Input should be a valid number, not '0.1'"),
        ("description: 5\n", "description", "Input should be a valid string, not 5"),
        (
            "train:\n  gradient_checkpointing: 1\n",
            "train.gradient_checkpointing",
            "Input should be a valid boolean, not 1",
        ),
    ],
)
def test_values_are_not_coerced_into_another_type(extra, path, message):
    assert [(p, m) for p, _, m in errors(MINIMAL + extra)] == [(path, message)]


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_numbers_are_finite(value):
    found = errors(MINIMAL + f"train:\n  learning_rate: {value}\n")
    assert [(p, m) for p, _, m in found] == [("train.learning_rate", "Input should be a finite number")]


def test_one_setting_one_key():
    ((path, _, message),) = errors(MINIMAL + "train:\n  epochs: 2\n  max_steps: 10\n")
    assert path == "train" and message.startswith("epochs (2) and max_steps (10) both set the run's length")
    assert [m for _, _, m in errors(MINIMAL + "train:\n  epochs: null\n")] == [
        "the run has no length: give train.epochs or train.max_steps"
    ]
    batch = errors(MINIMAL + "train:\n  grad_accumulation: 4\n  global_batch_size: 8\n")
    assert batch[0][2].startswith("global_batch_size (8) derives the gradient accumulation per backend")
    # a --set of one replaces the file's other: the command line states which one the user means
    shipped = paths.RECIPES / "gemma4-31b-tpu-v5p-8.yaml"
    assert "epochs: 1" in shipped.read_text()
    recipe = load_recipe(shipped, ["train.max_steps=4", "train.global_batch_size=8"])
    assert (recipe.train.max_steps, recipe.train.epochs, recipe.train.global_batch_size) == (4, None, 8)


@pytest.mark.parametrize("name", ["../../etc", "a/b", "/abs", ".hidden", "..", "with space", "x" * 101, "ä"])
def test_a_name_is_one_safe_path_component(name):
    ((path, _, message),) = errors(MINIMAL.replace("name: t", f"name: {yaml.safe_dump(name).splitlines()[0]}"))
    assert path == "name" and "can't name a folder" in message


def test_the_run_directory_stays_inside_output_dir(tmp_path):
    recipe = parse_recipe(MINIMAL + "output_dir: runs\n", base_dir=tmp_path)
    run = default_run_dir(recipe, "jax")
    assert run.parent == tmp_path / "runs" and run.name == "t-jax"


@pytest.mark.parametrize("path", sorted(paths.RECIPES.glob("*.yaml")), ids=lambda p: p.name)
def test_a_resolved_shipped_recipe_validates_again(path: Path):
    """A run's recipe.yaml is the resolved recipe with every default written out: it must read back (crosstune.run.
    layout validates it), though e.g. grad_accumulation and a derived epochs: null are both present."""
    from crosstune.recipe.schema import RESOLVED, Recipe

    for overrides in ([], ["train.global_batch_size=8"]):  # a global batch: grad_accumulation is written out too
        dumped = load_recipe(path, overrides).model_dump(mode="json")
        again = Recipe.model_validate(yaml.safe_load(yaml.safe_dump(dumped)), context={RESOLVED: True})
        assert again.model_dump(mode="json") == dumped


def test_set_values_are_parsed_the_same_way(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text(MINIMAL)
    assert load_recipe(f, ["train.learning_rate=5e-4"]).train.learning_rate == 5e-4
    with pytest.raises(RecipeError, match=r"train.max_steps: Input should be a valid integer, not '7'"):
        load_recipe(f, ["train.max_steps='7'"])
