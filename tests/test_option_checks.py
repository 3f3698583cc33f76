"""Options are checked before any work starts: a wrong one is one line naming it, exit 1, and nothing runs or is
written (`plan --backend tpu` printed "plan ok"; `study --backend tpu` ran two stages and locked the bundle to "tpu";
`--only ''` ran all eight stages; `launch --nodes 0` became 1; `TPU_WORKER_ID=abc` was a traceback)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from tests.helpers.paths import RECIPES, REPO

_register()


def refused(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner(env=env).invoke(app, list(args), terminal_width=400)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "\n" not in result.output.strip(), result.output
    return result.output.strip()


def test_plan_refuses_a_backend_that_is_not_one(tmp_path):
    said = refused("plan", str(RECIPES / "tiny-cpu.yaml"), "--backend", "tpu")
    assert said == "error: --backend 'tpu': one of torch, jax"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "tpu"], "error: --backend 'tpu': one of torch, jax"),
        (["--only", ""], "error: --only names no stage: give one or more of prepare, plan, train, export, serve,"),
        (["--only", ","], "error: --only names no stage: give one or more of prepare, plan, train, export, serve,"),
        (["--only", " , "], "error: --only names no stage"),
        (["--from", ""], "error: unknown stage '': the stages are prepare, plan"),
    ],
)
def test_study_refuses_wrong_options_before_anything_runs(tmp_path, args, message):
    bundle = tmp_path / "bundle"
    said = refused("study", str(RECIPES / "tiny-cpu.yaml"), "--out", str(bundle), *args)
    assert said.startswith(message), said
    assert not bundle.exists()  # not claimed: no bundle.json, so no backend recorded


@pytest.mark.parametrize("variable", ["TPU_WORKER_ID", "JAX_PROCESS_ID"])
@pytest.mark.parametrize("value", ["abc", "-1", "1.5"])
def test_a_process_index_that_is_not_one_is_one_line_naming_the_variable(tmp_path, variable, value):
    bundle = tmp_path / "bundle"
    said = refused("study", str(RECIPES / "tiny-cpu.yaml"), "--out", str(bundle), "--only", "plan",
                   env={variable: value})  # fmt: skip
    assert said == (f"error: {variable}={value!r}: not a process index (an integer >= 0, 0 = the lead): unset it or "
                    "give this host's index")  # fmt: skip
    assert not bundle.exists()


def test_launch_refuses_zero_nodes(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    out = tmp_path / "s.sbatch"
    said = refused("launch", "recipes/gemma4-31b-2xh100.yaml", "--on", "slurm", "--nodes", "0", "--out", str(out))
    assert said == "error: --nodes 0: give at least 1 (the nodes the job runs on)"
    assert not out.exists()
