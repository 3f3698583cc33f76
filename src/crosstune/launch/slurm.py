"""An sbatch script that runs `crosstune study` on Slurm nodes: N GPU nodes (data and plan on the first node,
training on every node — srun, one task per node: each starts its GPUs' workers through accelerate/torchrun and
meets node 0 at the rendezvous, FSDP2 across all of them — then the stages after training on the first node), or
one CPU node (a CPU partition: data preparation, evaluation, CI), no GPU requested.

Assumes what a Slurm cluster has: the crosstune checkout with its .venv (README "Real hardware": the lock plus the
CUDA wheels on GPU nodes) on a filesystem every node sees, from which the script is submitted; the bundle goes to
$CROSSTUNE_BUNDLES (default: bundles/ in the checkout), on that same shared filesystem.

Preemption: `--requeue` lets Slurm put the job back in the queue when a preemption (a partition with
PreemptMode=REQUEUE) or a node failure ends it, and the requeued script resumes: the finished stages are up to date
in the bundle and training continues from its last checkpoint there. With a bucket (gs://, s3:// or a folder, as
`crosstune study --bucket` takes) every study line keeps the bundle's copy there, so a job requeued onto nodes that
no longer see the bundle pulls it back first. `--open-mode=append` keeps the earlier attempts' output in the log, and
each attempt writes its number when it starts.
"""

from __future__ import annotations

from crosstune.emit import Raw, comment_lines, shell_line
from crosstune.launch.job_spec import STUDY_PORT, Job, LaunchError

RECOVERY = ["#SBATCH --requeue", "#SBATCH --open-mode=append"]  # preemption and node failure: requeued, resumed
# Slurm sets SLURM_RESTART_COUNT on a requeued job's attempts (sbatch(1), OUTPUT ENVIRONMENT VARIABLES)
ATTEMPT = "$((${SLURM_RESTART_COUNT:-0} + 1))"


def check(job: Job, nodes: int) -> None:
    platform = job.target.chip.platform
    if platform not in ("gpu", "cpu"):
        raise LaunchError(
            f"--on slurm runs GPU or CPU nodes, not {job.target.name}: a TPU VM goes to --on skypilot, "
            "a TPU slice to --on gke"
        )
    if nodes < 1:
        raise LaunchError(f"--nodes {nodes}: give at least 1")
    if platform == "cpu" and nodes > 1:
        raise LaunchError(f"--nodes {nodes}: a CPU target runs the study on one node; give --nodes 1")
    if job.backend != "torch" and nodes > 1:
        raise LaunchError(f"--nodes {nodes} trains with the torch backend (FSDP2 across nodes): give --backend torch")


def resources(job: Job, nodes: int) -> list[str]:
    """The allocation: whole nodes (the study uses every core, or every GPU), GPUs requested only on GPU nodes."""
    gpus = [f"#SBATCH --gpus-per-node={job.target.devices}"] if job.target.chip.platform == "gpu" else []
    return [f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1", *gpus, "#SBATCH --exclusive"]


def render(job: Job, *, nodes: int = 1, time_limit: str | None = None, bucket: str | None = None) -> str:
    check(job, nodes)
    on_gpu = job.target.chip.platform == "gpu"
    where = f"{nodes} node(s) × {job.target.devices} {job.target.chip.name.upper()}" if on_gpu else "one CPU node"
    keep = ["--bucket", bucket] if bucket else []  # the study pushes to it and pulls from it

    def study(*extra: str) -> Raw:
        return job.study(Raw('"$BUNDLE"'), *extra, *keep)

    train = study("--only", "train")
    if job.backend == "torch" and nodes > 1:  # node i starts its workers and meets node 0 at the rendezvous
        train = Raw(f'{train} --node-rank "$SLURM_NODEID" --main-address "$MAIN:{STUDY_PORT}"')
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job.name}",
        *resources(job, nodes),
        *RECOVERY,
        f"#SBATCH --output={job.name}-%j.out",
        *([f"#SBATCH --time={time_limit}"] if time_limit else []),
        comment_lines(
            [
                f"crosstune {job.version}: `crosstune study` of {job.recipe.name} (recipe hash {job.recipe_hash}) on "
                f"{where}, {job.backend} backend" + (" (FSDP2 across nodes)." if nodes > 1 else "."),
                "Submit from the crosstune checkout on the shared filesystem: sbatch THIS_FILE",
            ]
        ).rstrip("\n"),
        "set -euo pipefail",
        f'echo "attempt {ATTEMPT} of job ${{SLURM_JOB_ID:-?}} on $(hostname), $(date -u +%FT%TZ)"',
        'cd "${CROSSTUNE_HOME:-$SLURM_SUBMIT_DIR}"',
        *(shell_line("export {name}={value}", name=Raw(k), value=v) for k, v in job.labels().items()),
        "export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false",
        shell_line('BUNDLE="${{CROSSTUNE_BUNDLES:-$PWD/bundles}}"/{bundle}', bundle=job.bundle),
        'MAIN=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
        "export BUNDLE MAIN  # srun passes the environment to every node's task",
        "# 1. the data prepared once and the plan checked, on the first node",
        f'srun --nodes=1 --ntasks=1 -w "$MAIN" {study("--only", "prepare,plan")}',
        f"# 2. training on every node, {job.target.devices} GPU(s) each" if on_gpu else "# 2. training",
        shell_line("srun --nodes={nodes} --ntasks-per-node=1 bash -c {train}", nodes=Raw(str(nodes)), train=str(train)),
        "# 3. export, serve, bench, eval and cost on the first node",
        f'srun --nodes=1 --ntasks=1 -w "$MAIN" {study("--from", "export")}',
        f'echo "bundle: $BUNDLE (attempt {ATTEMPT})"',
    ]
    return "\n".join(lines) + "\n"
