"""Runs one iverilog/vvp command on untrusted Verilog with bounded time, CPU, memory, files and output.

Layers, each independent of the others: rlimits set in the child before exec (CPU seconds, address
space, file size, open files, no core dumps), a wall deadline with a kill of the whole process group,
a byte cap on combined stdout+stderr, cwd = the sample's own directory, a minimal environment, and,
where the kernel offers it, Landlock (writes only inside the sample directory, reads only the tool
installation, no TCP). What this does not protect against is listed in docs/EVAL_SANDBOX.md.

Call it from a single-threaded process (the evaluation's worker processes): `preexec_fn` is not safe
in a process that runs other threads.
"""

from __future__ import annotations

import math
import os
import resource
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from crosstune.evals.judge import landlock
from crosstune.units import MIB


@dataclass(frozen=True)
class Limits:
    """Resource bounds for one sample; `timeout_s` is the wall budget of the whole sample (all steps)."""

    timeout_s: float = 30.0
    memory_mib: int = 2048
    file_size_mib: int = 64  # the testbench's own wave.vcd reaches ~9 MB
    open_files: int = 64
    output_kib: int = 1024
    landlock: bool = True


@dataclass(frozen=True)
class RunResult:
    """What one command did. `limit` names the bound that stopped it (None when it ran to completion)."""

    returncode: int | None
    output: str
    wall_s: float
    limit: str | None = None  # "timeout" | "output" | "cpu" | "file_size" | "memory"
    landlocked: bool = False


@cache
def tool_read_paths() -> tuple[Path, ...]:
    """Where iverilog, vvp, their modules and shared libraries live: read+execute under Landlock."""
    paths = {Path("/usr"), Path("/lib"), Path("/lib64"), Path("/bin"), Path("/etc/ld.so.cache")}
    for tool in ("iverilog", "vvp"):
        found = shutil.which(tool)
        if found:
            paths.add(Path(found).resolve().parent.parent)  # the install prefix, e.g. /opt/iverilog
    return tuple(sorted(paths))


@cache
def _search_path() -> str:
    tool_dirs = {str(Path(p).resolve().parent) for p in map(shutil.which, ("iverilog", "vvp")) if p}
    return ":".join([*sorted(tool_dirs), "/usr/bin", "/bin"])


def _minimal_env(workdir: Path) -> dict[str, str]:
    return {"PATH": _search_path(), "LANG": "C", "LC_ALL": "C", "TMPDIR": str(workdir), "HOME": str(workdir)}


def _limit_child(workdir: Path, limits: Limits, cpu_s: int, readable: list[Path] | None) -> None:
    """Runs in the child between fork and exec; keep it to system calls (no lookups, no imports)."""
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    memory = limits.memory_mib * MIB
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    size = limits.file_size_mib * MIB
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if readable is not None:
        landlock.restrict_self([workdir, Path("/dev/null")], readable)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_limited(argv: list[str], workdir: Path, limits: Limits, wall_s: float) -> RunResult:
    """Run `argv` in `workdir` for at most `wall_s` seconds under `limits`; never raises on the command's
    own failure. Output is decoded as UTF-8 with replacement and truncated at the output cap."""
    wall_s = max(wall_s, 0.1)
    use_landlock = limits.landlock and landlock.abi_version() > 0
    readable = list(tool_read_paths()) if use_landlock else None
    env = _minimal_env(workdir)
    cpu_s = max(1, math.ceil(wall_s)) + 1  # the wall deadline normally fires first; CPU is the backstop
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # own process group: the kill reaches iverilog's ivlpp/ivl children
        preexec_fn=lambda: _limit_child(workdir, limits, cpu_s, readable),
    )
    try:
        output, limit = _collect(proc, limits.output_kib * 1024, start + wall_s)
    finally:  # also on an exception or Ctrl-C here: the children live in their own session
        _kill_group(proc)  # before reaping, while the group id is still ours; also ends stray grandchildren
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    limit = limit or _limit_from_exit(proc.returncode, output)
    return RunResult(proc.returncode, output, time.monotonic() - start, limit, use_landlock)


def _collect(proc: subprocess.Popen, cap: int, deadline: float) -> tuple[str, str | None]:
    """Read combined output up to `cap` bytes until EOF and exit, the deadline, or the cap."""
    chunks: list[bytes] = []
    size = 0
    limit: str | None = None
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                limit = "timeout"
                break
            if not selector.select(min(remaining, 1.0)):
                continue
            data = os.read(proc.stdout.fileno(), 65536)
            if not data:
                break
            chunks.append(data[: max(cap - size, 0)])
            size += len(data)
            if size > cap:
                limit = "output"
                break
    if limit is None and not _exited(proc, deadline):
        limit = "timeout"
    return b"".join(chunks).decode("utf-8", errors="replace"), limit


def _exited(proc: subprocess.Popen, deadline: float) -> bool:
    """Wait for exit without reaping (WNOWAIT), so the process group cannot be recycled before the kill."""
    pause = 0.0002
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)  # exit normally follows EOF within microseconds; back off if it does not
        pause = min(pause * 2, 0.01)
    return True


def _limit_from_exit(returncode: int, output: str) -> str | None:
    """Map a death by signal (or an allocation failure) to the resource bound that caused it."""
    if returncode == -signal.SIGXCPU:
        return "cpu"
    if returncode == -signal.SIGXFSZ:
        return "file_size"
    if "bad_alloc" in output or "Out of memory" in output or "out of memory" in output:
        return "memory"
    return None
