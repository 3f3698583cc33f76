"""Resume after SIGKILL, and two JAX processes: the loss curve of an uninterrupted single-process run, both times."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from tests.helpers.jax_recipes import REPO, tiny_recipe
from tests.helpers.ports import free_port

pytest.importorskip("tunix")

STEPS = 10
DRIVER = """
import sys
from pathlib import Path
from crosstune.recipe import load_recipe
from crosstune.train.session import train
train(load_recipe(sys.argv[1]), Path(sys.argv[2]), resume=sys.argv[3] == "resume", progress=False, backend="jax")
"""


def _write_recipe(recipe, path):
    path.write_text(yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False))
    return path


def _env(**extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), **extra}
    env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    return env


def _rows(run_dir):
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


@pytest.mark.slow
def test_resume_after_sigkill_reproduces_the_curve(tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    from crosstune.data import prepare_dataset
    from crosstune.train.session import train

    recipe = tiny_recipe(
        tiny_gemma4_dir,
        synth_corpus_dir,
        tmp_path,
        "gemma4",
        f"train.max_steps={STEPS}",
        "train.grad_accumulation=2",  # the MultiSteps accumulator is part of the restored optimizer state
        "train.per_device_batch_size=1",
        "train.checkpoint_every=3",
        "train.keep_last=5",
    )
    prepare_dataset(recipe)
    reference = train(recipe, tmp_path / "uninterrupted", progress=False, backend="jax").losses

    run_dir = tmp_path / "killed"
    recipe_file = _write_recipe(recipe, tmp_path / "recipe.yaml")
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(recipe_file), str(run_dir), "fresh"],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            if len(_rows(run_dir)) >= 5 and (run_dir / "checkpoints" / "3").is_dir():
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    killed_at = len(_rows(run_dir))
    assert 5 <= killed_at < STEPS

    resumed = train(recipe, run_dir, resume=True, progress=False, backend="jax")
    meta = json.loads((run_dir / "run.json").read_text())
    assert 3 <= meta["resumed_from_step"] < STEPS
    assert [r["step"] for r in _rows(run_dir)] == list(range(1, STEPS + 1))
    np.testing.assert_allclose(resumed.losses, reference, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_two_processes_train_like_one(tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    """2 CPU processes × 4 devices (jax.distributed, gloo), fsdp=2 × tp=4: each process loads its own rows."""
    from crosstune.data import prepare_dataset
    from crosstune.train.session import train

    recipe = tiny_recipe(
        tiny_gemma4_dir,
        synth_corpus_dir,
        tmp_path,
        "gemma4",
        "backend.jax.mesh.fsdp=2",
        "backend.jax.mesh.tp=4",
        "backend.jax.replicate_indivisible_heads=true",
        "train.per_device_batch_size=1",
        f"train.max_steps={STEPS // 2}",
    )
    prepare_dataset(recipe)  # once, before the launch (both processes reuse it)
    recipe_file = _write_recipe(recipe, tmp_path / "recipe.yaml")
    port = free_port()
    run_dir = tmp_path / "two"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(recipe_file), str(run_dir), "fresh"],
            env=_env(
                XLA_FLAGS="--xla_force_host_platform_device_count=4",
                JAX_COORDINATOR_ADDRESS=f"localhost:{port}",
                JAX_NUM_PROCESSES="2",
                JAX_PROCESS_ID=str(i),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["processes"] == 2 and meta["devices"] == 8
    two = [r["loss"] for r in _rows(run_dir)]

    one = train(recipe, tmp_path / "one", progress=False, backend="jax").losses
    np.testing.assert_allclose(two, one, rtol=1e-4, atol=1e-4)  # the same rows per step, summed in another order
