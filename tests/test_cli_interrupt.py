"""Ctrl-C in train and prepare: exit 130 with what was kept and the command that continues."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from tests.helpers.data import tiny_args
from tests.helpers.paths import REPO
from tests.helpers.processes import default_sigint

TINY = REPO / "recipes" / "tiny-cpu.yaml"
_register()
runner = CliRunner()


def _sets(model_dir: Path, corpus_dir: Path, out: Path, *extra: str) -> list[str]:
    """test_cli_errors.tiny_args without the recipe file: the --set overrides alone."""
    return tiny_args(model_dir, corpus_dir, out, *extra)[1:]


@pytest.mark.parametrize(("backend", "checkpoint"), [("torch", "checkpoint-4"), ("jax", "4")])
def test_ctrl_c_in_train_names_the_checkpoint_and_the_resume_command(
    backend, checkpoint, tmp_path, monkeypatch, tiny_gemma4_dir, synth_corpus_dir
):
    from crosstune.train.session import TrainingSession

    def interrupted_after_two_checkpoints(session):
        assert session.backend_name == backend
        for step in (2, 4):
            (session.run_dir / "checkpoints" / checkpoint.replace("4", str(step))).mkdir(parents=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(TrainingSession, "run", interrupted_after_two_checkpoints)
    run = tmp_path / "run"
    sets = _sets(tiny_gemma4_dir, synth_corpus_dir, tmp_path)
    result = runner.invoke(app, ["train", str(TINY), "--backend", backend, "--run-dir", str(run), *sets])
    assert result.exit_code == 130, result.output
    assert "Traceback" not in result.output
    assert f"{run} keeps the checkpoint of step 4" in result.output
    resume = f"resume with: crosstune train {TINY} --backend {backend} --run-dir {run} --set "
    assert resume in result.output and result.output.rstrip().endswith(" --resume")


def test_ctrl_c_before_the_first_checkpoint_says_resume_starts_over(tmp_path, monkeypatch, tiny_gemma4_dir):
    from crosstune.train.session import TrainingSession

    def interrupted(session):
        raise KeyboardInterrupt

    monkeypatch.setattr(TrainingSession, "run", interrupted)
    result = runner.invoke(app, ["train", str(TINY), "--set", f"model.path={tiny_gemma4_dir}"])
    assert result.exit_code == 130 and result.output.startswith("interrupted (Ctrl-C): ")
    assert "no checkpoint was saved yet (one every 10 steps): --resume starts from step 0" in result.output
    assert f"resume with: crosstune train {TINY} --backend torch --set model.path=" in result.output


def test_ctrl_c_in_prepare_keeps_nothing_half_made(tmp_path, monkeypatch, tiny_gemma4_dir, synth_corpus_dir):
    import crosstune.data.cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(crosstune.data.cli, "prepare_dataset", interrupted)
    sets = _sets(tiny_gemma4_dir, synth_corpus_dir, tmp_path)
    result = runner.invoke(app, ["data", "prepare", str(TINY), *sets, "--lenient"])
    assert result.exit_code == 130
    assert f"interrupted (Ctrl-C): nothing was written to {tmp_path / 'data'} (nothing is kept)" in result.output
    assert f"rerun: crosstune data prepare {TINY} --set " in result.output
    assert result.output.rstrip().endswith(" --lenient")


@pytest.mark.slow
def test_sigint_during_real_torch_training(tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    """The real thing: SIGINT to a training process once its first checkpoint is in place."""
    run = tmp_path / "run"
    sets = _sets(tiny_gemma4_dir, synth_corpus_dir, tmp_path, "train.max_steps=400", "train.checkpoint_every=2")
    command = [sys.executable, "-c", "from crosstune.cli import main; main()", "train", str(TINY), *sets]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    assert runner.invoke(app, ["data", "prepare", *command[4:]]).exit_code == 0  # torch trains on prepared data
    proc = subprocess.Popen(
        [*command, "--backend", "torch", "--run-dir", str(run)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_sigint,
    )
    deadline = time.monotonic() + 240
    while not (run / "checkpoints" / "checkpoint-2").is_dir():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()[-3000:]
    err = err.decode()
    assert "Traceback" not in err
    assert f"{run} keeps the checkpoint of step " in err and "--backend torch --run-dir" in err and "--resume" in err
