"""Runs one `crosstune ...` command line the way a user's shell would, under the fuzzer's limits: its own process
group, an address-space limit (RLIMIT_AS) and a wall-clock limit; stdout and stderr to files in the case's folder.

Two ways to start it, the same command line either way:
- `fork` (the default): a multiprocessing forkserver that imported crosstune's CLI and the libraries its commands
  import at once (tests/fuzz/preload.py: everything but torch and jax) forks a child per case; the child sets its
  limits, points fd 1 and 2 at the files, sets sys.argv and calls `crosstune.cli.main()`, as the `crosstune`
  script does. The import is ~1 s of CPU per command on this machine, most of a refused case (docs/BENCHMARKS.md).
- `exec` (FUZZ_START=exec): the installed `crosstune` script in a plain subprocess; what a failure's reproduction
  line runs.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

MEMORY_LIMIT = 6 << 30  # RLIMIT_AS of every command (bytes)
CROSSTUNE = Path(sys.executable).with_name("crosstune")


@dataclass
class Outcome:
    code: int | None  # None: killed at the wall-clock limit
    out: str
    err: str
    wall_s: float
    cpu_s: float | None = None  # user + system of the command and its children (None: killed before it said)


# Linux capabilities (linux/capability.h): root's override of file permissions, dropped for the command
_CAP_VERSION_3, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 0x20080522, 1, 2


def drop_permission_override() -> None:
    """Make file permissions bind this process even as root: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from its
    effective and permitted sets (capset(2)). The fuzzer's cases live in a folder nobody may list (mode 0311, session.
    py), so a command walking "/" or ".." can't reach another case's canaries; without this, root reads any folder.
    A process without them (not root) has nothing to drop."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(_CAP_VERSION_3, 0), (Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    mask = ~((1 << _CAP_DAC_OVERRIDE) | (1 << _CAP_DAC_READ_SEARCH)) & 0xFFFFFFFF
    data[0].effective &= mask
    data[0].permitted &= mask
    data[0].inheritable &= mask
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _limit_self() -> None:
    """In the child, before crosstune runs: a process group of its own (killed whole at the wall limit), the
    address-space limit, and file permissions that bind it (drop_permission_override)."""
    os.setsid()
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    drop_permission_override()


def _forked_main(argv: list[str], cwd: str, out: str, err: str, env: dict[str, str]) -> None:
    """The forked child: the `crosstune` script's main with sys.argv set; its exit status is the command's."""
    _limit_self()
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.environ.update(env)
    if "HF_HUB_CACHE" in env:  # huggingface_hub read it when the forkserver imported it: as a fresh process would
        from huggingface_hub import constants

        constants.HF_HUB_CACHE = env["HF_HUB_CACHE"]
    os.chdir(cwd)
    sys.argv = [str(CROSSTUNE), *argv]
    code = 1
    try:
        from crosstune.cli import main

        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # what the interpreter does with an uncaught exception: the traceback, exit 1
        traceback.print_exc()
    atexit._run_exitfuncs()  # as the interpreter's exit would (os._exit below skips them)
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    Path(out).with_name("cpu_s.txt").write_text(str(sum(u.ru_utime + u.ru_stime for u in used)))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or broken stream: nothing more can be said on it
            pass
    os._exit(code)


class Runner:
    """Starts commands; `start` is "fork" or "exec" (see the module's docstring)."""

    def __init__(self, start: str = "fork"):
        if start not in ("fork", "exec"):
            raise ValueError(f"FUZZ_START={start!r}: fork or exec")
        self.start = start
        self._context = None
        if start == "fork":
            self._context = multiprocessing.get_context("forkserver")
            self._context.set_forkserver_preload(["tests.fuzz.preload"])

    def run(self, argv: list[str], cwd: Path, logs: Path, timeout_s: float, env: dict[str, str]) -> Outcome:
        out, err = logs / "stdout.txt", logs / "stderr.txt"
        t0, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        if self.start == "fork":
            code = self._fork(argv, cwd, out, err, timeout_s, env)
            cpu = logs / "cpu_s.txt"
            cpu_s = float(cpu.read_text()) if cpu.is_file() else None
        else:  # the runner waits for no other child meanwhile: the difference is the command's
            code = self._exec(argv, cwd, out, err, timeout_s, env)
            now = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu_s = now.ru_utime + now.ru_stime - children.ru_utime - children.ru_stime
        wall = time.perf_counter() - t0
        read = lambda p: p.read_bytes().decode("utf-8", "replace") if p.is_file() else ""  # noqa: E731
        return Outcome(code, read(out), read(err), wall, cpu_s)

    def _fork(self, argv, cwd, out, err, timeout_s, env) -> int | None:
        child = self._context.Process(target=_forked_main, args=(argv, str(cwd), str(out), str(err), env))
        child.start()
        child.join(timeout_s)
        timed_out = child.exitcode is None
        if not _kill_group(child.pid) and timed_out:
            child.kill()  # killed before it made its group
        child.join()
        return None if timed_out else child.exitcode

    def _exec(self, argv, cwd, out, err, timeout_s, env) -> int | None:
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen(
                [str(CROSSTUNE), *argv],
                cwd=cwd,
                stdout=o,
                stderr=e,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **env},
                preexec_fn=_limit_self,
            )
            try:
                code = proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                code = None
            _kill_group(proc.pid)
            proc.wait()
        return code


def _kill_group(pid: int) -> bool:
    """SIGKILL to the command's process group (its children too: a simulator, a tokenizer pool), finished or not;
    False when there is no such group."""
    try:
        os.killpg(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False
