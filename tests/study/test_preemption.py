"""Preemption, on this CPU with a local folder standing in for the bucket: a `crosstune study --bucket` process
SIGKILLed once a checkpoint reached the bucket, its machine-local bundle deleted (a new machine), the same command
run again: it pulls the bucket's copy, training resumes from the bucket's checkpoint and ends on the final LoRA of
an uninterrupted study (both backends)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from crosstune.run.metrics import read_metrics
from crosstune.run.records import read_run_record
from crosstune.study.bundle import read_manifest
from tests.helpers.paths import RECIPES, REPO
from tests.helpers.preemption import ATOL, complete_checkpoint_in, final_lora, largest_difference, moved_since
from tests.helpers.processes import kill_9_when
from tests.helpers.study import overrides

pytestmark = pytest.mark.slow
STEPS, EVERY = 8, 2


def _study(backend: str, bundle, sets, *extra: str) -> subprocess.Popen:
    """`crosstune study` in a process of its own; its output in a log file beside the bundle (a pipe nobody reads
    while waiting for the kill would fill and stop it)."""
    argv = [
        sys.executable,
        "-m",
        "crosstune.cli",
        "study",
        str(RECIPES / "tiny-cpu.yaml"),
        "--backend",
        backend,
        "--out",
        str(bundle),
        "--only",
        "prepare,plan,train",
        *(a for s in sets for a in ("--set", s)),
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]), "OMP_NUM_THREADS": "2"}
    log = bundle.parent / f"{bundle.name}-{len(list(bundle.parent.glob('*.log')))}.log"
    bundle.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    proc.log = log
    return proc


def _finish(proc: subprocess.Popen) -> str:
    proc.wait(timeout=600)
    out = proc.log.read_text()
    assert proc.returncode == 0, out[-4000:]
    return out


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_a_preempted_study_resumes_from_the_bucket_to_the_uninterrupted_lora(
    backend, tmp_path, tiny_gemma4_dir, synth_corpus_dir
):
    sets = overrides(
        tiny_gemma4_dir,
        synth_corpus_dir,
        f"train.max_steps={STEPS}",
        f"train.checkpoint_every={EVERY}",
        "train.keep_last=10",
    )
    reference = tmp_path / "reference"
    _finish(_study(backend, reference, sets))

    bucket, bundle = tmp_path / "bucket", tmp_path / "machine" / "bundle"
    run_rel = f"runs/tiny-cpu-{backend}"
    proc = _study(backend, bundle, sets, "--bucket", str(bucket))
    kill_9_when(proc, lambda: complete_checkpoint_in(bucket / "bundle" / run_rel))
    in_bucket = read_manifest(bucket / "bundle")
    assert [in_bucket.stages[n].status for n in ("prepare", "plan")] == ["done", "done"]  # pushed per stage
    assert in_bucket.stages["train"].status == "running"
    shutil.rmtree(bundle)  # the preempted machine's disk is gone

    log = _finish(_study(backend, bundle, sets, "--bucket", str(bucket)))
    assert "bucket: pulling " in log and "the bundle is missing here" in log
    run_dir = bundle / run_rel
    resumed_from = read_run_record(run_dir).resumed_from_step
    assert EVERY <= resumed_from < STEPS and resumed_from % EVERY == 0, log[-3000:]
    assert [row.step for row in read_metrics(run_dir)] == list(range(1, STEPS + 1))
    assert read_manifest(bundle).stages["train"].status == "done"
    assert read_manifest(bucket / "bundle").stages["train"].status == "done"  # the end reached the bucket

    got = final_lora(run_dir)
    worst = largest_difference(got, final_lora(reference / run_rel))
    assert worst <= ATOL, (worst, ATOL)
    # The comparison has teeth: the steps trained after the resume moved the LoRA by far more than ATOL.
    at_resume = json.loads((run_dir / "run.json").read_text())["resumed_from_step"]
    moved = moved_since(run_dir, at_resume, got)
    assert moved > 10 * ATOL, (moved, ATOL)
