"""The slow study tests: the jax backend's bundle next to the torch one in `crosstune report`, and kill -9 in the
middle of a study (a real `crosstune study` process), then the rerun that finishes the bundle."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from crosstune.run.layout import saved_steps
from crosstune.study.bundle import read_manifest
from crosstune.study.runner import STAGE_NAMES
from tests.helpers.paths import RECIPES, REPO
from tests.helpers.processes import kill_9_when
from tests.helpers.study import overrides, study

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def no_serving_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CROSSTUNE_SERVE_VENV", str(tmp_path / "no-serve-env"))


def test_each_backend_makes_a_bundle_and_the_report_sets_them_side_by_side(tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    sets = overrides(tiny_gemma4_dir, synth_corpus_dir)
    done = {}
    for backend in ("torch", "jax"):
        manifest, _, t_first = study(tmp_path / backend, sets, backend=backend)
        assert [manifest.stages[n].status for n in STAGE_NAMES] == ["done"] * 4 + ["skipped"] * 2 + ["done"] * 2
        _, log, t_second = study(tmp_path / backend, sets, backend=backend)
        assert log.count(": up to date (") == 6 and t_second < 0.25 * t_first, (backend, t_first, t_second)
        done[backend] = manifest
    assert done["jax"].stages["prepare"].record == done["torch"].stages["prepare"].record  # same data
    from crosstune.report.writer import write_report

    write_report([tmp_path / "torch", tmp_path / "jax"], tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "torch · cpu · tiny-cpu-torch" in md and "jax · cpu · tiny-cpu-jax" in md  # training, side by side
    assert "| torch · finetune |" in md and "| jax · finetune |" in md  # evaluation, side by side
    assert "same loss definition" in md


def test_kill_9_in_the_middle_of_training_then_rerunning_finishes_without_redoing_finished_stages(
    tmp_path, tiny_gemma4_dir, synth_corpus_dir
):
    steps, every = 12, 3
    sets = overrides(tiny_gemma4_dir, synth_corpus_dir, f"train.max_steps={steps}", f"train.checkpoint_every={every}")
    bundle = tmp_path / "bundle"
    argv = [sys.executable, "-m", "crosstune.cli", "study", str(RECIPES / "tiny-cpu.yaml"), "--backend", "torch"]
    argv += ["--out", str(bundle), *(a for s in sets for a in ("--set", s))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = bundle / "runs" / "tiny-cpu-torch"
    kill_9_when(proc, lambda: run_dir.is_dir() and bool(saved_steps(run_dir)) and saved_steps(run_dir)[0] >= every)
    killed = read_manifest(bundle)
    assert killed.stages["train"].status == "running"  # as the kill left it
    assert [killed.stages[n].status for n in ("prepare", "plan")] == ["done", "done"]
    kept = saved_steps(run_dir)[-1]
    assert every <= kept < steps

    manifest, log, _ = study(bundle, sets)
    for name in ("prepare", "plan"):
        assert manifest.stages[name].started == killed.stages[name].started, name
        assert f"{name}: up to date (" in log
    assert "train: continuing where an earlier run stopped (running)" in log
    assert f"resuming {run_dir} from step " in log
    assert manifest.stages["train"].record == {"steps": steps}
    assert [manifest.stages[n].status for n in STAGE_NAMES] == ["done"] * 4 + ["skipped"] * 2 + ["done"] * 2
