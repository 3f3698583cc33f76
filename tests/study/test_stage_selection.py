"""Which stages a study runs: --only/--from/--with selection, the optional stages, and their refusals in one line."""

from __future__ import annotations

import pytest

from crosstune.study import runner
from crosstune.study.bundle import StudyError
from crosstune.study.runner import STAGE_NAMES
from tests.helpers.paths import RECIPES
from tests.helpers.study import overrides, study


def test_the_command_line_says_what_was_wrong_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from crosstune.cli import _register, app

    _register()
    result = CliRunner().invoke(
        app, ["study", str(RECIPES / "tiny-cpu.yaml"), "--out", str(tmp_path / "b"), "--only", "train,evl"]
    )
    assert result.exit_code == 1
    assert " ".join(result.output.split()) == (
        "error: unknown stage 'evl': the stages are prepare, plan, train, export, serve, bench, eval, cost (and with "
        "--with: pretrain, parity, eval-base)"
    )


def test_the_optional_stages_run_only_when_asked():
    """pretrain, parity and eval-base (the demo's) are off unless --with names them; then in pipeline order."""
    assert [st.name for st in runner.select_stages()] == STAGE_NAMES
    names = [st.name for st in runner.select_stages(with_=("eval-base", "pretrain", "parity"))]
    assert names == [
        "pretrain",
        "prepare",
        "plan",
        "parity",
        "train",
        "export",
        "serve",
        "bench",
        "eval",
        "eval-base",
        "cost",
    ]
    assert [st.name for st in runner.select_stages(from_stage="eval", with_=("eval-base",))] == [
        "eval",
        "eval-base",
        "cost",
    ]
    with pytest.raises(StudyError, match="stage parity runs only when asked: add --with parity"):
        runner.select_stages(only=["parity"])
    with pytest.raises(StudyError, match="--with 'base': one of pretrain, parity, eval-base"):
        runner.select_stages(with_=("base",))


def test_pretrain_refuses_a_recipe_whose_model_is_not_the_base_it_trains(tmp_path, synth_corpus_dir):
    with pytest.raises(
        StudyError, match="--with pretrain trains crosstune's gemma4 small base, but the recipe's model is gemma4 tiny"
    ):
        study(tmp_path / "b", overrides(tmp_path / "none", synth_corpus_dir), with_=("pretrain",))
    assert not (tmp_path / "b").exists()
