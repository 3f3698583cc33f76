"""`crosstune recipe schema`: every recipe key by its YAML path with its type, default, bound and the schema's own
description, read off the pydantic models (so a new key or description shows without being listed anywhere)."""

from __future__ import annotations

from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.recipe.reference import keys
from crosstune.recipe.schema import EvalSection, TrainSection

_register()


def test_every_key_is_listed_with_its_description_default_and_bound():
    found = {k.path: k for k in keys()}
    assert found["eval.protocol"].about == EvalSection.model_fields["protocol"].description
    assert found["eval.protocol"].kind == "codev-r1 | codev-r1-card | null" and found["eval.protocol"].default == "null"
    assert found["train.learning_rate"].default == str(TrainSection().learning_rate)
    assert "at most" in found["train.learning_rate"].about  # its bound, from crosstune.bounds.RECIPE
    assert found["model.family"].default == "required" and found["data.sources[].path"].default == "required"
    assert found["eval.k"].kind == "list of int" and found["eval.k"].default == "[1, 5]"
    described = [path for path, k in found.items() if k.about]
    assert len(found) > 80 and len(described) > 60  # every section's keys, most of them explained
    assert [k.path for k in keys("cost")] == ["cost.price_per_hour", "cost.currency", "cost.serve_hours_per_month"]


def test_the_command_prints_a_section_and_refuses_an_unknown_one():
    runner = CliRunner()
    result = runner.invoke(app, ["recipe", "schema", "eval"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "eval.connect_timeout_s" in result.output and "reachability" in result.output  # its description
    assert "train.learning_rate" not in result.output
    refused = runner.invoke(app, ["recipe", "schema", "evals"], terminal_width=200)
    assert refused.exit_code == 1 and "no recipe section 'evals': one of name, description" in refused.output
