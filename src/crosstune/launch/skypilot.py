"""A SkyPilot task YAML that runs `crosstune study` on one TPU VM or one GPU box.

resources: the recipe's hardware target (tpu-v5p-8 / tpu-v6e-8 as SkyPilot's TPU names, with the TPU VM runtime;
H100:2, H200:1 as GPU counts). workdir: the checkout `crosstune launch` runs in (SkyPilot syncs it). setup: the
lock plus the accelerator's wheels. run: the study into ~/crosstune-bundles/NAME on the VM's disk; with a bucket
the bundle is copied to it after every run (and copied back first, so a new cluster resumes the bucket's copy),
through a SkyPilot storage mount; without one it stays on the cluster (`sky rsync-down`-style: `rsync -Pavz
CLUSTER:~/crosstune-bundles/NAME .`). The bundle is written on local disk, not on the bucket mount: its writers
rename folders into place, which object-store mounts do not do atomically.
"""

from __future__ import annotations

import shlex
from typing import Any

from crosstune.launch.job_spec import Job, LaunchError, install_steps, to_yaml

TPU_RUNTIME = {"tpu-v5p": "v2-alpha-tpuv5", "tpu-v6e": "v2-alpha-tpuv6e", "tpu-v5e": "v2-alpha-tpuv5-lite"}
LOCAL_BUNDLES = "$HOME/crosstune-bundles"
BUCKET_MOUNT = "/crosstune-bucket"
SINGLE_HOST_TPU_CHIPS = {"tpu-v5p": 4, "tpu-v6e": 8, "tpu-v5e": 8}  # chips on one TPU VM host


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


def skypilot_task(job: Job, bucket: str | None = None) -> dict[str, Any]:
    accel, accel_args = accelerators(job)
    resources: dict[str, Any] = {"accelerators": accel, "disk_size": 512}
    if accel_args:
        resources["accelerator_args"] = accel_args
    bundle = f'"{LOCAL_BUNDLES}/{job.bundle}"'
    run = ["set -euo pipefail", f"mkdir -p {LOCAL_BUNDLES}"]
    if bucket:
        saved = shlex.quote(f"{BUCKET_MOUNT}/{job.bundle}")
        resume = "  # a new cluster resumes the bucket's copy"
        run.append(f"[ -d {bundle} ] || [ ! -d {saved} ] || cp -a {saved} {bundle}{resume}")
    run.append(f"status=0; {job.study(bundle)} || status=$?")
    if bucket:
        run.append(f"mkdir -p {saved} && cp -a {bundle}/. {saved}/")
    else:
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


def render(job: Job, bucket: str | None = None) -> str:
    head = (
        f"# crosstune {job.version}: `crosstune study` of {job.recipe.name} (recipe hash {job.recipe_hash}) on "
        f"{job.target.name} with the {job.backend} backend.\n# Launch: sky launch -c {job.name} THIS_FILE "
        "(from the crosstune checkout: it is the workdir).\n"
    )
    return head + to_yaml(skypilot_task(job, bucket))
