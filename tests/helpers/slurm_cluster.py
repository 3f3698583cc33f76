"""A single-node Slurm cluster a test starts on this machine (scripts/slurm_local.sh, Debian's Slurm 22.05) and
always stops, by PID, and what a test asks of it. Its clients talk to it alone: the environment a test hands them
names its own slurm.conf (its ports, its MUNGE socket), never the host's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.paths import REPO

SCRIPT = REPO / "scripts" / "slurm_local.sh"
JOBS_LEFT = REPO / "scripts" / "slurm_jobs_left.py"
NEEDED = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol")
INSTALL = "install Debian's Slurm with `bash scripts/install_slurm.sh` (`make test-launch` does)"
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


def missing() -> str | None:
    """Why a cluster can't start here, or None."""
    absent = [tool for tool in NEEDED if shutil.which(tool) is None]
    if absent:
        return f"{', '.join(absent)} not installed: {INSTALL}"
    if os.geteuid() != 0:
        return "the local Slurm cluster runs its daemons as root and munge: run as root"
    return None


@dataclass
class Cluster:
    folder: Path
    env: dict[str, str]  # the environment its clients (and the jobs submitted with it) run with

    def run(self, *argv: str) -> str:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{' '.join(argv)}: {done.stdout}{done.stderr}"
        return done.stdout

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as KEY: VALUE (JobState, Restarts, ExitCode, ...)."""
        fields = self.run("scontrol", "show", "job", "--oneliner", job_id).split()
        return dict(f.split("=", 1) for f in fields if "=" in f)

    def wait(self, job_id: str, done: Callable[[dict[str, str]], bool], what: str, timeout_s: float) -> dict[str, str]:
        """Poll the job until `done(job)`; fails naming `what`, with the job's record and its daemons' logs."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if done(job):
                return job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id}: not {what} after {timeout_s:.0f} s: {job}\n{self.logs()}")

    def processes_of_jobs(self) -> list[str]:
        """The PIDs of its jobs' processes and step daemons still on the node (scripts/slurm_jobs_left.py)."""
        return self.run(sys.executable, str(JOBS_LEFT), str(self.folder)).split()

    def logs(self) -> str:
        logs = sorted((self.folder / "log").glob("*"))
        return "\n".join(f"{p.name}: ...{p.read_text(errors='replace')[-1500:]}" for p in logs)


@contextmanager
def local_cluster() -> Iterator[Cluster]:
    """Start the cluster (a few seconds), yield it, stop it whatever happened: its jobs cancelled, then slurmd,
    slurmctld and munged by their PIDs, and the folder removed. Its folder is a fresh one under the temp dir, open to
    the munge user (a test's tmp_path is not)."""
    folder = Path(tempfile.mkdtemp(prefix="crosstune-slurm-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SQUEUE_"))}
    try:
        started = subprocess.run(
            ["bash", str(SCRIPT), "start", str(folder)], capture_output=True, text=True, timeout=120, env=env
        )
        assert started.returncode == 0, started.stdout + started.stderr
        assert started.stdout.strip() == f"export SLURM_CONF={folder}/slurm.conf", started.stdout
        yield Cluster(folder, {**env, "SLURM_CONF": str(folder / "slurm.conf")})
    finally:
        stopped = subprocess.run(
            ["bash", str(SCRIPT), "stop", str(folder)], capture_output=True, text=True, timeout=120, env=env
        )
        assert stopped.returncode == 0, f"{folder}: {stopped.stdout}{stopped.stderr}"  # its PIDs kept there
        shutil.rmtree(folder, ignore_errors=True)
