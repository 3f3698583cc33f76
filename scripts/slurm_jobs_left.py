"""The PIDs of a local Slurm cluster's jobs still running after its slurmd stopped (scripts/slurm_local.sh stop), on
one line: its step daemons (slurmstepd holding the cluster's slurmd log open), the jobs' processes (their
environment holds SLURM_JOB_ID and the cluster's SLURM_CONF: Slurm sets both) and every process below those.
Never this script's own ancestors.

    python3 scripts/slurm_jobs_left.py DIR   # DIR as given to slurm_local.sh
"""

import os
import sys


def _read(pid: str) -> tuple[str, str, list[bytes], set[str]]:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = f.read().split(b"\0")
    files = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            files.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()[1], env, files


def jobs_left(cluster: str) -> list[str]:
    conf, log = f"SLURM_CONF={cluster}/slurm.conf".encode(), f"{cluster}/log/slurmd.log"
    parent, roots = {}, []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm, parent[pid], env, files = _read(pid)
        except OSError:  # gone, or not ours to read
            continue
        in_a_job = conf in env and any(v.startswith(b"SLURM_JOB_ID=") for v in env)
        if in_a_job or (comm == "slurmstepd" and log in files):
            roots.append(pid)
    mine, pid = set(), str(os.getpid())
    while pid in parent and pid not in mine:
        mine.add(pid)
        pid = parent[pid]
    found: set[str] = set()
    while roots:
        pid = roots.pop()
        if pid not in found and pid not in mine:
            found.add(pid)
            roots += [child for child, up in parent.items() if up == pid]
    return sorted(found, key=int)


if __name__ == "__main__":
    print(" ".join(jobs_left(os.path.realpath(sys.argv[1]))))
