"""A SkyPilot task YAML that runs `crosstune study` on one TPU VM or one GPU box.

resources: the recipe's hardware target (tpu-v5p-8 / tpu-v6e-8 as SkyPilot's TPU names, with the TPU VM runtime;
H100:2, H200:1 as GPU counts). workdir: the checkout `crosstune launch` runs in (SkyPilot syncs it). setup: the
lock plus the accelerator's wheels. run: the study into ~/crosstune-bundles/NAME on the VM's disk; with a bucket
(a SkyPilot storage mount) the study keeps the bundle's copy there itself (`crosstune study --bucket`: pushed after
every stage and checkpoint, pulled first on a new cluster: crosstune.study.recovery), and the task is a managed job
(`sky jobs launch`) whose controller relaunches it after a preemption (resources.job_recovery; `--spot`:
resources.use_spot); without one it stays on the cluster (`rsync -Pavz CLUSTER:~/crosstune-bundles/NAME .`). The
bundle is written on local disk, not on the bucket mount: its writers rename folders into place, which
object-store mounts do not do atomically; the copy renames files only.
"""

from __future__ import annotations

from typing import Any

from crosstune.emit import Raw, shell_line
from crosstune.launch.job_spec import Job, LaunchError, install_steps, to_yaml

TPU_RUNTIME = {"tpu-v5p": "v2-alpha-tpuv5", "tpu-v6e": "v2-alpha-tpuv6e", "tpu-v5e": "v2-alpha-tpuv5-lite"}
LOCAL_BUNDLES = "$HOME/crosstune-bundles"
BUCKET_MOUNT = "/crosstune-bucket"
SINGLE_HOST_TPU_CHIPS = {"tpu-v5p": 4, "tpu-v6e": 8, "tpu-v5e": 8}  # chips on one TPU VM host
# A managed job's recovery: a preemption is always recovered (a new cluster, here or in the next region with
# capacity); a study that fails on its own is not rerun (its message says what to fix).
JOB_RECOVERY = {"strategy": "EAGER_NEXT_REGION", "max_restarts_on_errors": 0}


def accelerators(job: Job) -> tuple[str, dict[str, Any]]:
    """SkyPilot's accelerator string for the target, and accelerator_args (the TPU VM runtime)."""
    hw = job.target
    if hw.chip.platform == "tpu":
        if hw.devices > SINGLE_HOST_TPU_CHIPS[hw.chip.name]:
            raise LaunchError(
                f"{hw.name} spans several hosts ({hw.note or f'{hw.devices} chips'}): launch it as a multi-host "
                "slice with --on gke (a JobSet over the slice's hosts)"
            )
        return hw.name, {"runtime_version": TPU_RUNTIME[hw.chip.name], "tpu_vm": True}
    if hw.chip.platform == "gpu":
        return f"{hw.chip.name.upper()}:{hw.devices}", {}
    raise LaunchError(f"{hw.name}: SkyPilot launches TPU VMs and GPU boxes; give --target (e.g. tpu-v5p-8, 2xh100)")


def recovery(bucket: str | None, spot: bool) -> dict[str, Any]:
    """The resources a managed job recovers with: with a bucket the study survives a new cluster (spot allowed);
    without one its bundle is on the cluster's disk, so spot capacity is refused."""
    if spot and not bucket:
        raise LaunchError(
            "--spot needs --bucket: a preempted VM's disk is gone, and the bucket keeps the bundle "
            "(checkpoints included) that the next VM resumes"
        )
    return {"use_spot": spot, "job_recovery": dict(JOB_RECOVERY)} if bucket else {}


def submit_argv(bucket: str | None) -> list[str]:
    """`sky jobs launch` (managed: recovered after a preemption) with a bucket; `sky launch` (the cluster stays, with
    the bundle on its disk) without."""
    managed = ["sky", "jobs", "launch", "-n", "{name}", "{spec}"]
    return managed if bucket else ["sky", "launch", "-c", "{name}", "{spec}"]


def skypilot_task(job: Job, bucket: str | None = None, spot: bool = False) -> dict[str, Any]:
    accel, accel_args = accelerators(job)
    resources: dict[str, Any] = {"accelerators": accel, "disk_size": 512}
    if accel_args:
        resources["accelerator_args"] = accel_args
    resources.update(recovery(bucket, spot))
    bundle = Raw(shell_line('"{local}"/{bundle}', local=Raw(LOCAL_BUNDLES), bundle=job.bundle))
    run = ["set -euo pipefail", f"mkdir -p {LOCAL_BUNDLES}"]
    if bucket:  # the study pushes the bundle to the mount as it goes, and a new cluster pulls it first
        run.append(f"status=0; {job.study(bundle)} --bucket {BUCKET_MOUNT} || status=$?")
    else:
        run.append(f"status=0; {job.study(bundle)} || status=$?")
        where = f"~/crosstune-bundles/{job.bundle}"
        run.append(f'echo "the bundle stays on the cluster; copy it with: rsync -Pavz {job.name}:{where} ."')
    run.append("exit $status")
    task: dict[str, Any] = {
        "name": job.name,
        "resources": resources,
        "workdir": ".",
        "envs": {**job.labels(), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        "setup": "\n".join(["set -euo pipefail", *install_steps(job)]) + "\n",
        "run": "\n".join(run) + "\n",
    }
    if bucket:
        task["file_mounts"] = {BUCKET_MOUNT: {"name": bucket.removeprefix("gs://"), "mode": "MOUNT"}}
    return task


def render(job: Job, bucket: str | None = None, spot: bool = False) -> str:
    submit = " ".join(submit_argv(bucket)[:-2])
    capacity = " on spot capacity" if spot else ""
    head = [
        f"crosstune {job.version}: `crosstune study` of {job.recipe.name} (recipe hash {job.recipe_hash}) on "
        f"{job.target.name}{capacity} with the {job.backend} backend.",
        f"Launch: {submit} {job.name} THIS_FILE (from the crosstune checkout: it is the workdir).",
    ]
    return to_yaml(skypilot_task(job, bucket, spot), head)
