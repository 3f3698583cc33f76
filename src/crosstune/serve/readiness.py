"""When a started vLLM is ready: the port's listening socket held by the server's own process group (another server
on the port would answer too), /health 200, and a 1-token completion (and the adapter's) answered: the engine can
pass /health and die at its first request. A leader that exited (whatever its status) is a failed start, its cause
read from this start's part of the log (serve.logscan). Kept apart from starting and stopping the process
(serve.process), as vLLM keeps its readiness checker apart."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from crosstune.serve import proctree
from crosstune.serve.engine import ServeError
from crosstune.serve.logscan import explain_failure
from crosstune.serve.proctree import ProcId
from crosstune.serve.state import ServerState
from crosstune.untrusted_files import parse_json


def exit_status(proc: subprocess.Popen) -> int | None:
    """The child's exit status once it exited, without reaping it: an unreaped child keeps its PID, so its process
    group can't be a stranger's while we stop it."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return proc.poll()
    if info is None:
        return None
    killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
    return -info.si_status if killed else info.si_status  # Popen's convention: -N for signal N


def listens(state: ServerState) -> bool:
    """The port's listening socket is held by a process of the server's group (not by another server)."""
    members = [p.pid for p in proctree.group_members(state.pid)]
    return bool(proctree.socket_holders(proctree.listening_inodes(state.port), members))


def leader_running(state: ServerState, proc: subprocess.Popen | None) -> bool:
    if proc is not None and exit_status(proc) is not None:
        return False
    return state.leader is None or proctree.is_running(ProcId.from_json(state.leader))


def health(state: ServerState, timeout: float = 5.0) -> str | None:
    """None when the server is up and healthy; otherwise why not (exited, refused, status)."""
    import httpx

    if not leader_running(state, None):
        return f"the vLLM process {state.pid} has exited"
    try:
        r = httpx.get(state.base_url + "/health", timeout=timeout)
    except httpx.HTTPError as e:
        return f"/health: {type(e).__name__}: {e}"
    return None if r.status_code == 200 else f"/health answered {r.status_code}"


def one_token(state: ServerState, model: str | None = None, timeout: float = 120.0) -> str | None:
    """None when a 1-token completion succeeds; otherwise why not."""
    import httpx

    body = {"model": model or state.model, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    try:
        r = httpx.post(state.base_url + "/v1/completions", json=body, timeout=timeout)
    except httpx.HTTPError as e:
        return f"1-token completion: {type(e).__name__}: {e}"
    if r.status_code != 200:
        return f"1-token completion answered {r.status_code}: {r.text[:200]}"
    try:
        usage = parse_json(r.content, "the 1-token completion's answer").get("usage") or {}
    except (ValueError, AttributeError):  # not JSON (or past the reader's bounds), or not an object
        return f"1-token completion answered non-JSON: {r.text[:200]}"
    ok = isinstance(usage, dict) and usage.get("completion_tokens") == 1
    return None if ok else f"1-token completion returned usage {usage}"


def wait_ready(state: ServerState, proc: subprocess.Popen | None, timeout_s: float) -> None:
    """Poll until the port is held by the server's own process group, /health is 200 and a 1-token completion
    (and the adapter's) succeeds. The engine can pass /health and die at its first request, so health alone is
    not readiness; another server on the port would answer both, so the port's owner is checked first."""
    deadline = time.monotonic() + timeout_s

    def cause() -> str:
        return explain_failure(Path(state.log), state.log_offset)

    while time.monotonic() < deadline:
        if not leader_running(state, proc):
            code = exit_status(proc) if proc is not None else "?"
            raise ServeError(f"vLLM exited (status {code}) before it was ready; {cause()}")
        if listens(state) and health(state, timeout=2.0) is None:
            why = one_token(state) or (state.lora_name and one_token(state, state.lora_name))
            if not why:
                return
            if not leader_running(state, proc) or health(state, timeout=2.0):
                raise ServeError(f"vLLM died at its first request ({why}); {cause()}")
        time.sleep(1.0)
    raise ServeError(f"vLLM not ready after {timeout_s:.0f} s; {cause()}")
