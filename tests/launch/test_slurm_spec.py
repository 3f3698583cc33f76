"""The sbatch script of `crosstune launch --on slurm`, run with Slurm's commands stubbed (srun runs each node's task
here, scontrol names the nodes, the study records its argv): a bucket reaches every study line, a CPU target asks
for no GPU, and each attempt writes its number as it starts. The real engine runs it in test_slurm_cluster.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers.launch_specs import H100, SRUN_STUB, fails, launch
from tests.helpers.paths import REPO

TINY = "recipes/tiny-cpu.yaml"
STUDY_STUB = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps([os.environ.get("SLURM_NODEID"), *sys.argv[1:]]) + "\\n")
sys.exit(int(os.environ.get("STUB_EXIT", "0")))
"""


def run_script(tmp_path: Path, script: Path, **env: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """The script as Slurm would run it on nodes gpu-a and gpu-b; (the run, each study call as [node, *argv])."""
    bin_dir, home, log = tmp_path / "bin", tmp_path / "checkout", tmp_path / "study.log"
    (home / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(exist_ok=True)
    stubs = {
        bin_dir / "srun": SRUN_STUB,
        bin_dir / "scontrol": "#!/bin/bash\nprintf 'gpu-a\\ngpu-b\\n'\n",
        home / ".venv" / "bin" / "crosstune": STUDY_STUB,
    }
    for path, body in stubs.items():
        path.write_text(body)
        path.chmod(0o755)
    log.unlink(missing_ok=True)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CROSSTUNE_HOME": str(home),
        "SLURM_JOB_NODELIST": "gpu-[a-b]",
        "SLURM_JOB_ID": "77",
        "STUB_LOG": str(log),
        **env,
    }
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    return done, calls


def directives(script: Path) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([a-z-]+)=?(\S*)", script.read_text(), re.M))


@pytest.mark.parametrize("bucket", ["bundle-copies", "/mnt/nfs/bundles", "gs://my-bundles/studies", "s3://my-bundles"])
def test_a_bucket_reaches_every_study_line_of_the_script(tmp_path, bucket):
    """A folder, gs:// or s3://, as `crosstune study --bucket` takes: each step's study keeps the copy itself."""
    script = tmp_path / "study.sbatch"
    launch(H100, "--on", "slurm", "--target", "8xh100", "--nodes", "2", "--bucket", bucket, "--out", str(script))
    done, calls = run_script(tmp_path, script)
    assert done.returncode == 0, done.stderr
    assert [(node, argv[argv.index("--only" if "--only" in argv else "--from") + 1]) for node, *argv in calls] == [
        ("0", "prepare,plan"),
        ("0", "train"),
        ("1", "train"),
        ("0", "export"),
    ]
    assert all(argv[argv.index("--bucket") + 1] == bucket for _, *argv in calls)


def test_a_bucket_slurm_can_t_use_is_refused_and_skypilot_still_wants_a_gcs_name(tmp_path):
    out = str(tmp_path / "s.sbatch")
    assert "--bucket is empty: give gs://NAME, s3://NAME or a folder" in fails(
        H100, "--on", "slurm", "--bucket", " ", "--out", out
    )
    assert "--bucket gs://: name the bucket, e.g. gs://my-bundles" in fails(
        H100, "--on", "slurm", "--bucket", "gs://", "--out", out
    )
    assert not Path(out).exists()
    said = fails(H100, "--on", "skypilot", "--bucket", "bundle-copies/x", "--out", str(tmp_path / "t.yaml"))
    assert "not a GCS bucket name" in said  # a storage mount: SkyPilot's rule


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_a_cpu_target_runs_one_cpu_node_with_no_gpu_request(tmp_path, backend):
    script = tmp_path / "cpu.sbatch"
    launch(TINY, "--on", "slurm", "--target", "cpu", "--backend", backend, "--out", str(script))
    found = directives(script)
    assert "gpus-per-node" not in found and "gres" not in found
    assert (found["nodes"], found["ntasks-per-node"], found["exclusive"]) == ("1", "1", "")  # the whole node
    assert "on one CPU node, " + backend in script.read_text()
    done, calls = run_script(tmp_path, script)
    assert done.returncode == 0, done.stderr
    torch_sets = ["--set", "backend.torch.nodes=1", "--set", "backend.torch.devices=1"] if backend == "torch" else []
    study = ["study", TINY, "--backend", backend, *torch_sets, "--set", "hardware=cpu"]
    bundle = f"{tmp_path}/checkout/bundles/tiny-cpu-{backend}"
    assert calls == [  # one node: no rendezvous to meet
        ["0", *study, "--only", "prepare,plan", "--out", bundle],
        ["0", *study, "--only", "train", "--out", bundle],
        ["0", *study, "--from", "export", "--out", bundle],
    ]


def test_slurm_refuses_what_its_nodes_can_t_run(tmp_path):
    out = str(tmp_path / "s.sbatch")
    assert "a CPU target runs the study on one node" in fails(
        TINY, "--on", "slurm", "--target", "cpu", "--nodes", "2", "--out", out
    )
    assert "--nodes 2 trains with the torch backend (FSDP2 across nodes)" in fails(
        H100, "--on", "slurm", "--target", "8xh100", "--nodes", "2", "--backend", "jax", "--out", out
    )
    said = fails("recipes/gemma4-31b-tpu-v5p-8.yaml", "--on", "slurm", "--out", out)
    assert "--on slurm runs GPU or CPU nodes, not tpu-v5p-8: a TPU VM goes to --on skypilot" in said


def test_each_attempt_writes_its_number_as_it_starts(tmp_path):
    """A requeued job's attempt is named on its first line, also when it dies before its end (--open-mode=append
    keeps every attempt's lines in one log)."""
    script = tmp_path / "study.sbatch"
    launch(TINY, "--on", "slurm", "--target", "cpu", "--out", str(script))
    text = script.read_text()
    assert text.index('echo "attempt ') < text.index("srun ")  # before any step
    done, _ = run_script(tmp_path, script, SLURM_RESTART_COUNT="2", STUB_EXIT="3")  # killed in its first step
    assert done.returncode == 3
    assert re.fullmatch(r"attempt 3 of job 77 on \S+, \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", done.stdout.splitlines()[0])
    done, _ = run_script(tmp_path, script)
    assert done.stdout.splitlines()[0].startswith("attempt 1 of job 77 on ")
    assert done.stdout.splitlines()[-1] == f"bundle: {tmp_path}/checkout/bundles/tiny-cpu-torch (attempt 1)"


def test_the_docs_try_the_slurm_path_with_the_script_the_test_uses():
    doc = (REPO / "docs" / "REAL_HARDWARE.md").read_text()
    for command in (
        "bash scripts/install_slurm.sh",
        "scripts/slurm_local.sh start",
        "scripts/slurm_local.sh stop",
        "--on slurm --target cpu",
    ):
        assert command in doc


def test_a_hostile_set_value_and_bucket_are_each_one_word_of_every_study_line(tmp_path):
    """crosstune.emit's shell line: a --set value with a newline and command syntax, and a bucket folder named with
    them, reach each study call as the word they are; bash runs nothing else (no PWNED file)."""
    value = "description=x\n$(touch PWNED) `touch PWNED`; touch PWNED 'q' \"d\""
    bucket = str(tmp_path / "b\n$(touch PWNED)")
    script = tmp_path / "study.sbatch"
    launch(
        H100,
        "--on",
        "slurm",
        "--target",
        "8xh100",
        "--nodes",
        "2",
        "--set",
        value,
        "--bucket",
        bucket,
        "--out",
        str(script),
    )
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    done, calls = run_script(tmp_path, script)
    assert done.returncode == 0, done.stderr
    assert len(calls) == 4 and all(argv[argv.index("--set") + 1] == value for _, *argv in calls)
    assert all(argv[argv.index("--bucket") + 1] == bucket for _, *argv in calls)
    assert not list(tmp_path.rglob("PWNED"))
