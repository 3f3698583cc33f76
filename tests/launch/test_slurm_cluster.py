"""`crosstune launch --on slurm --submit` on a real Slurm: a single-node cluster from Debian's packages, started on
this machine for these tests (scripts/slurm_local.sh) and stopped by PID whatever happens. The tiny study runs on its
CPU node into a complete bundle; then the requeue drill with a folder as the bucket: the job requeued during
training, the node's bundle deleted while it waits, and the next attempt pulls the bucket's copy, resumes from its
checkpoint and ends on the uninterrupted study's LoRA."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crosstune.run.metrics import read_metrics
from crosstune.run.records import read_run_record
from crosstune.study.bundle import read_manifest
from tests.helpers.paths import RECIPES
from tests.helpers.preemption import ATOL, complete_checkpoint_in, final_lora, largest_difference, moved_since
from tests.helpers.slurm_cluster import FINISHED, Cluster, local_cluster, missing
from tests.helpers.study import overrides

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]
STEPS, EVERY = 8, 2
BUNDLE = "tiny-cpu-torch"  # crosstune.launch.job_spec's name for the tiny recipe's torch study on its cpu target
RUN = "runs/tiny-cpu-torch"
DONE = {
    "prepare": "done",
    "plan": "done",
    "train": "done",
    "export": "done",
    "eval": "done",
    "cost": "done",
    "serve": "skipped",
    "bench": "skipped",
}  # no vLLM here: that is `make test-serve`'s


@pytest.fixture(scope="module")
def cluster():
    if why := missing():
        pytest.fail(why)  # these tests are chosen by name (-m slurm): without Slurm they fail, saying how to get it
    with local_cluster() as running:
        yield running


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, tiny_gemma4_dir, synth_corpus_dir) -> tuple[Path, list[str]]:
    """The checkout a job runs in (the recipe inside it, its .venv this test's), and the study's --set options."""
    root = tmp_path_factory.mktemp("checkout")
    (root / "recipes").mkdir()
    shutil.copy(RECIPES / "tiny-cpu.yaml", root / "recipes")
    (root / ".venv").symlink_to(sys.prefix)
    sets = overrides(
        tiny_gemma4_dir,
        synth_corpus_dir,
        f"train.max_steps={STEPS}",
        f"train.checkpoint_every={EVERY}",
        "train.keep_last=10",
    )
    return root, [a for s in sets for a in ("--set", s)]


def submit(cluster: Cluster, checkout: tuple[Path, list[str]], spec: str, bundles: Path, *extra: str) -> str:
    """`crosstune launch --on slurm --target cpu --submit` from the checkout, as a user would; the job's id."""
    root, sets = checkout
    env = {**cluster.env, "CROSSTUNE_BUNDLES": str(bundles), "CROSSTUNE_SERVE_VENV": str(root / "no-serve-env")}
    argv = [
        str(root / ".venv" / "bin" / "crosstune"),
        "launch",
        "recipes/tiny-cpu.yaml",
        "--on",
        "slurm",
        "--target",
        "cpu",
        *sets,
        *extra,
        "--out",
        spec,
        "--submit",
    ]
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "#SBATCH --gpus" not in (root / spec).read_text()  # a CPU node: no GPU asked for
    return re.search(r"Submitted batch job (\d+)", done.stdout).group(1)


def job_log(checkout: tuple[Path, list[str]], job_id: str) -> str:
    return (checkout[0] / f"crosstune-tiny-cpu-torch-{job_id}.out").read_text()


@pytest.fixture(scope="module")
def uninterrupted(cluster, checkout, tmp_path_factory) -> tuple[str, dict[str, str], Path]:
    bundles = tmp_path_factory.mktemp("bundles")
    job_id = submit(cluster, checkout, "study.sbatch", bundles)
    job = cluster.wait(job_id, lambda j: j["JobState"] in FINISHED, "finished", timeout_s=400)
    return job_id, job, bundles / BUNDLE


def test_a_submitted_study_runs_on_the_cpu_node_into_a_complete_bundle(uninterrupted, checkout):
    job_id, job, bundle = uninterrupted
    log = job_log(checkout, job_id)
    assert (job["JobState"], job["ExitCode"], job["Restarts"]) == ("COMPLETED", "0:0", "0"), log[-3000:]
    assert log.splitlines()[0].startswith(f"attempt 1 of job {job_id} on ")  # written as the attempt starts
    assert log.splitlines()[-1] == f"bundle: {bundle} (attempt 1)"
    manifest = read_manifest(bundle)
    assert {name: entry.status for name, entry in manifest.stages.items()} == DONE
    assert manifest.recipe.overrides[-3:] == ["backend.torch.nodes=1", "backend.torch.devices=1", "hardware=cpu"]
    (host,) = manifest.hosts.values()
    assert host["cuda"] == [] and host["cluster"]["SLURM_JOB_ID"] == job_id  # ran inside the Slurm job, on CPU
    assert [row.step for row in read_metrics(bundle / RUN)] == list(range(1, STEPS + 1))


def test_requeued_in_training_with_the_node_s_bundle_gone_the_job_resumes_from_the_bucket(
    cluster, checkout, uninterrupted, tmp_path
):
    bucket, bundles = tmp_path / "bucket", tmp_path / "node-disk"
    job_id = submit(cluster, checkout, "drill.sbatch", bundles, "--bucket", str(bucket))
    in_bucket = bucket / BUNDLE / RUN
    job = cluster.wait(
        job_id,
        lambda j: complete_checkpoint_in(in_bucket) or j["JobState"] in FINISHED,
        "training with a complete checkpoint in the bucket",
        timeout_s=300,
    )
    assert job["JobState"] == "RUNNING", job_log(checkout, job_id)[-3000:]
    # requeuehold: requeued as a preemption would (Slurm ends the whole attempt), and held until the node's disk is
    # wiped, so the next attempt can't start before it (a plain requeue restarts it ~10 s later, cred_expire)
    cluster.run("scontrol", "requeuehold", job_id)
    cluster.wait(
        job_id,
        lambda j: j["JobState"] == "PENDING" and not cluster.processes_of_jobs(),
        "held with no process left",
        timeout_s=60,
    )
    shutil.rmtree(bundles / BUNDLE)
    cluster.run("scontrol", "release", job_id)
    job = cluster.wait(job_id, lambda j: j["JobState"] in FINISHED, "finished", timeout_s=400)

    log = job_log(checkout, job_id)
    assert (job["JobState"], job["ExitCode"], job["Restarts"]) == ("COMPLETED", "0:0", "1"), log[-3000:]
    attempts = [line for line in log.splitlines() if line.startswith("attempt ")]
    assert [a.split(" on ")[0] for a in attempts] == [f"attempt 1 of job {job_id}", f"attempt 2 of job {job_id}"]
    second = log[log.index(attempts[1]) :]  # what the requeued attempt did
    assert "bucket: pulling " in second and "the bundle is missing here" in second
    run_dir = bundles / BUNDLE / RUN
    resumed_from = read_run_record(run_dir).resumed_from_step
    assert EVERY <= resumed_from < STEPS and resumed_from % EVERY == 0, second[-3000:]
    assert f"from step {resumed_from}" in second
    assert [row.step for row in read_metrics(run_dir)] == list(range(1, STEPS + 1))
    assert {name: entry.status for name, entry in read_manifest(bundles / BUNDLE).stages.items()} == DONE
    assert read_manifest(bucket / BUNDLE).stages["cost"].status == "done"  # the end reached the bucket too

    got = final_lora(run_dir)
    worst = largest_difference(got, final_lora(uninterrupted[2] / RUN))
    assert worst <= ATOL, (worst, ATOL)  # tests/helpers/preemption.py says why LR/100
    assert moved_since(run_dir, resumed_from, got) > 10 * ATOL  # the resumed steps moved it by far more
