"""A study whose recipe names files that are not there is refused up front, in one line naming the recipe key and
what to run first, with nothing written; recipes/tiny-cpu.yaml's head says what makes its inputs, and doing what it
says is enough."""

from __future__ import annotations

import shlex
import shutil

import pytest
from rich.console import Console
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.recipe import load_recipe
from crosstune.study.context import StudyContext
from crosstune.study.evaluation import cost_inputs
from crosstune.study.runner import STAGE_NAMES
from crosstune.untrusted_files import UnreadableFile
from tests.helpers.paths import RECIPES

_register()


def one_line_failure(args: list[str]) -> str:
    result = CliRunner().invoke(app, args, terminal_width=400)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "\n" not in result.output.strip(), result.output
    return result.output.strip()


def test_missing_recipe_inputs_are_refused_before_anything_runs(tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    recipe = tmp_path / "recipes" / "tiny-cpu.yaml"
    recipe.parent.mkdir()
    shutil.copy(RECIPES / "tiny-cpu.yaml", recipe)
    bundle = tmp_path / "bundle"
    said = one_line_failure(["study", str(recipe), "--out", str(bundle)])
    assert said == (
        f"error: model.path {recipe.parent}/../demo-out/models/tiny-gemma4: no such file or folder, and "
        f"stage prepare reads it: make it first (the head of {recipe} says how) or give another with --set "
        "model.path=PATH"
    )
    sets = ["--set", f"model.path={tiny_gemma4_dir}"]
    said = one_line_failure(["study", str(recipe), "--out", str(bundle), *sets])
    assert said.startswith(
        f"error: data.sources[0].path: nothing matches {recipe.parent}/../demo-out/corpus/train.jsonl"
    )
    assert said.endswith(
        f"stage prepare reads it: make it first (the head of {recipe} says how) or give another with --set data.sources"
    )
    sets += ["--set", f"data.sources=[{{path: {synth_corpus_dir / 'train.jsonl'}}}]"]
    said = one_line_failure(["study", str(recipe), "--out", str(bundle), *sets])  # found at eval, after training
    assert said.startswith(
        f"error: eval.problems {recipe.parent}/../demo-out/corpus/eval: no such file or folder, "
        "and stage eval reads it:"
    )
    assert not bundle.exists()
    said = one_line_failure(["study", str(recipe), "--out", str(bundle), "--only", "eval,cost", *sets])
    assert "eval.problems" in said and not bundle.exists()


def test_what_the_tiny_recipe_s_head_says_to_run_makes_every_input(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    (checkout / "recipes").mkdir(parents=True)
    recipe = checkout / "recipes" / "tiny-cpu.yaml"
    shutil.copy(RECIPES / "tiny-cpu.yaml", recipe)
    commands = [
        line.removeprefix("#   crosstune ")
        for line in recipe.read_text().splitlines()
        if line.startswith("#   crosstune ")
    ]
    assert [c.split()[:2] for c in commands] == [["synth", "--out"], ["model", "tiny"]]
    monkeypatch.chdir(checkout)
    for command in commands:
        args = shlex.split(command.replace("--n 2000", "--n 40"))  # fewer records: the same files, faster
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, (command, result.output)
    loaded = load_recipe(recipe)
    ctx = StudyContext(tmp_path / "bundle", loaded, "torch", Console(), {"stages": {}})
    ctx.check_recipe_paths(STAGE_NAMES, recipe)  # every stage finds what it reads
    assert (checkout / "demo-out" / "corpus" / "eval").is_dir()


def test_a_prices_file_that_can_t_be_read_is_refused_before_anything_runs(tmp_path):
    """A --prices file that can't be read is refused before any stage, by the bounded reader (the cost stage read it
    with Path.read_text: a file not in UTF-8 was a UnicodeDecodeError's traceback after the training)."""
    bundle, prices = tmp_path / "bundle", tmp_path / "prices.yaml"
    prices.write_bytes(b"chips:\n  caf\xe9: {on_demand: 1}\n")
    study = ["study", str(RECIPES / "tiny-cpu.yaml"), "--out", str(bundle), "--prices", str(prices)]
    assert one_line_failure(study) == f"error: {prices}:2: invalid UTF-8 at byte 5 of the line"
    ctx = StudyContext(bundle, load_recipe(RECIPES / "tiny-cpu.yaml"), "torch", Console(), {}, prices=prices)
    with pytest.raises(UnreadableFile, match="invalid UTF-8"):
        cost_inputs(ctx)
    prices.write_text("42\n")
    assert one_line_failure(study).endswith("expected top-level keys `chips` and/or `targets`, got int 42")
    assert not bundle.exists()
