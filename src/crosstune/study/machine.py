"""What this machine is, for the bundle's manifest: CPU, memory, CUDA devices (nvidia-smi), TPU metadata, libraries.

Nothing here starts an accelerator runtime: CUDA is read through nvidia-smi, a TPU through the environment GKE and
TPU VMs set, /dev/accel*, and (only on a TPU VM) the metadata server with a 2-second deadline.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from crosstune.run.rundir import versions
from crosstune.units import bytes_to_gib

# What a TPU host's environment says about it. Not TPU_SKIP_MDS_QUERY: `import jax` sets it to 1 on every machine
# without a TPU (jax/_src/cloud_tpu_init.py), so it describes the process, not the host.
TPU_ENV = ("TPU_ACCELERATOR_TYPE", "TPU_TOPOLOGY", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES")
METADATA = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/"
CLUSTER_ENV = ("SLURM_JOB_ID", "SLURM_NNODES", "SLURM_NODEID", "JOB_COMPLETION_INDEX", "SKYPILOT_TASK_ID")


# The CPU features that decide which kernels XLA and torch pick on CPU, so the float sums' order: a CPU run's bits
# depend on them (docs/BENCHMARKS.md "The demo": the same code gave other figures on another CPU).
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")


def _cpu() -> dict[str, Any]:
    model, info = platform.processor() or platform.machine(), {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            if not key:
                break  # the first processor's block is enough
            info.setdefault(key, value)
    model = info.get("model name", model)
    ident = " ".join(f"{k} {info[k]}" for k in ("vendor_id", "cpu family", "model", "stepping") if k in info)
    flags = set(info.get("flags", "").split())
    memory_gib = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gib = round(bytes_to_gib(int(line.split()[1]) * 1024), 1)  # kB
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {
        "model": model,
        "id": ident,
        "isa": [f for f in ISA_FLAGS if f in flags],
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": memory_gib,
        "load_avg": load,
    }


def _cuda() -> list[dict[str, str]]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    query = ["--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
    try:
        out = subprocess.run([exe, *query], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    return [{"name": r[0], "memory": r[1], "driver": r[2]} for r in rows if len(r) >= 3]


def _tpu_metadata(key: str) -> str | None:
    import httpx

    try:
        r = httpx.get(METADATA + key, headers={"Metadata-Flavor": "Google"}, timeout=2.0)
    except httpx.HTTPError:
        return None
    return r.text.strip() if r.status_code == 200 else None


def _tpu() -> dict[str, Any] | None:
    env = {k: os.environ[k] for k in TPU_ENV if os.environ.get(k)}
    chips = sorted(p.name for p in Path("/dev").glob("accel*"))
    if not env and not chips:
        return None
    info: dict[str, Any] = {"env": env, "dev_accel": len(chips)}
    if chips and "TPU_ACCELERATOR_TYPE" not in env:  # a TPU VM: its metadata server says what it is
        for key in ("accelerator-type", "agent-worker-number"):
            if (value := _tpu_metadata(key)) is not None:
                info[key] = value
    return info


def serving_version() -> str | None:
    """vLLM's version in the serving environment, when there is one."""
    from crosstune.serve.engine import VLLM_VERSION, vllm_binary

    return VLLM_VERSION if vllm_binary() is not None else None


def describe_machine() -> dict[str, Any]:
    """The machine this process runs on, as the manifest records it per host."""
    try:
        crosstune_version = md.version("crosstune")
    except md.PackageNotFoundError:
        crosstune_version = "unknown"
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu": _cpu(),
        "cuda": _cuda(),
        "tpu": _tpu(),
        "cluster": {k: os.environ[k] for k in CLUSTER_ENV if os.environ.get(k)},
        "versions": {"crosstune": crosstune_version, **versions()},
    }
    if (vllm := serving_version()) is not None:
        info["versions"]["vllm (serving env)"] = vllm
    return info


def accelerator_summary(info: dict[str, Any]) -> str:
    """One line: what accelerators the host had."""
    if info.get("cuda"):
        names = sorted({g["name"] for g in info["cuda"]})
        return f"{len(info['cuda'])} × {', '.join(names)}"
    if info.get("tpu"):
        tpu = info["tpu"]
        kind = tpu["env"].get("TPU_ACCELERATOR_TYPE") or tpu.get("accelerator-type") or "TPU"
        return f"{kind} ({tpu['dev_accel']} /dev/accel*)"
    cpu = info.get("cpu", {})
    return f"CPU only ({cpu.get('usable_cores')} cores, {cpu.get('memory_gib')} GiB)"
