"""An sbatch script that runs `crosstune study` on N GPU nodes: data and plan on the first node, training on every
node (srun, one task per node: each starts its GPUs' workers through accelerate/torchrun and meets node 0 at the
rendezvous, FSDP2 across all of them), then the stages after training on the first node.

Assumes what a Slurm GPU cluster has: the crosstune checkout with its .venv (README "Real hardware": the lock plus
the CUDA wheels) on a filesystem every node sees, from which the script is submitted; the bundle goes to
$CROSSTUNE_BUNDLES (default: bundles/ in the checkout), on that same shared filesystem.

Preemption: `--requeue` lets Slurm put the job back in the queue when a preemption (a partition with
PreemptMode=REQUEUE) or a node failure ends it, and the requeued script resumes: the finished stages are up to date
in the bundle on the shared filesystem and training continues from its last checkpoint there. `--open-mode=append`
keeps the earlier attempts' output in the log.
"""

from __future__ import annotations

import shlex

from crosstune.launch.job_spec import STUDY_PORT, Job, LaunchError

SBATCH_DIRECTIVES = ("job-name", "nodes", "ntasks-per-node", "gpus-per-node", "exclusive", "output", "time",
                     "requeue", "open-mode")  # fmt: skip
RECOVERY = ["#SBATCH --requeue", "#SBATCH --open-mode=append"]  # preemption and node failure: requeued, resumed


def check(job: Job, nodes: int) -> None:
    if job.target.chip.platform != "gpu":
        raise LaunchError(f"--on slurm runs GPU nodes: give --target a GPU box (e.g. 8xh100), not {job.target.name}")
    if job.backend != "torch":
        raise LaunchError("--on slurm trains with the torch backend (FSDP2 across nodes): give --backend torch")
    if nodes < 1:
        raise LaunchError(f"--nodes {nodes}: give at least 1")


def render(job: Job, *, nodes: int = 1, time_limit: str | None = None) -> str:
    check(job, nodes)
    gpus = job.target.devices
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job.name}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus}",
        "#SBATCH --exclusive",
        *RECOVERY,
        f"#SBATCH --output={job.name}-%j.out",
        *([f"#SBATCH --time={time_limit}"] if time_limit else []),
        f"# crosstune {job.version}: `crosstune study` of {job.recipe.name} (recipe hash {job.recipe_hash}) on "
        f"{nodes} node(s) × {gpus} {job.target.chip.name.upper()}, torch backend (FSDP2 across nodes).",
        "# Submit from the crosstune checkout on the shared filesystem: sbatch THIS_FILE",
        "set -euo pipefail",
        'cd "${CROSSTUNE_HOME:-$SLURM_SUBMIT_DIR}"',
        *(f"export {k}={shlex.quote(v)}" for k, v in job.labels().items()),
        "export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false",
        f'BUNDLE="${{CROSSTUNE_BUNDLES:-$PWD/bundles}}/{job.bundle}"',
        'MAIN=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
        "export BUNDLE MAIN  # srun passes the environment to every node's task",
        "# 1. the data prepared once and the plan checked, on the first node",
        f'srun --nodes=1 --ntasks=1 -w "$MAIN" {job.study(chr(34) + "$BUNDLE" + chr(34), "--only", "prepare,plan")}',
        f"# 2. training on every node: node i starts its {gpus} workers and meets node 0 at $MAIN:{STUDY_PORT}",
        f"srun --nodes={nodes} --ntasks-per-node=1 bash -c "
        + shlex.quote(
            job.study('"$BUNDLE"', "--only", "train")
            + f' --node-rank "$SLURM_NODEID" --main-address "$MAIN:{STUDY_PORT}"'
        ),
        "# 3. export, serve, bench, eval and cost on the first node",
        f'srun --nodes=1 --ntasks=1 -w "$MAIN" {job.study(chr(34) + "$BUNDLE" + chr(34), "--from", "export")}',
        'echo "bundle: $BUNDLE (attempt $((${SLURM_RESTART_COUNT:-0} + 1)))"',
    ]
    return "\n".join(lines) + "\n"
