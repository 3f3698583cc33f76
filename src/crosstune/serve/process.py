"""vLLM as a managed subprocess: its own process group, a state file (pid, port, log), readiness by a real
completion, and a crash detected by process exit or failed health — whatever the exit status (vLLM's CPU engine
dies on an unsupported head size and the server still exits 0).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from crosstune.serve.engine import ServeError, cpu_head_dim_problems, max_lora_rank, require_vllm

STATE_FILE = "server.json"
LOG_FILE = "vllm.log"
READY_TIMEOUT_S = 300.0  # 30-120 s to /health on 2 loaded cores, plus the first request's compile


@dataclass
class ServerState:
    pid: int  # also the process group id (start_new_session)
    port: int
    model: str  # the served model name (base)
    lora_name: str | None
    model_dir: str
    log: str
    started: float

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _spec_of(model_dir: Path):
    from crosstune.families import family_of_hf_config

    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        raise ServeError(f"{model_dir}: no config.json (expected an HF model directory: a base or a merged export)")
    cfg = json.loads(cfg_path.read_text())
    try:
        fam = family_of_hf_config(cfg)
    except (KeyError, ValueError) as e:
        raise ServeError(f"{cfg_path}: {e}") from None
    return fam.spec_from_hf_config(cfg.get("text_config", cfg), name=model_dir.name)


def vllm_argv(
    vllm: Path, model_dir: Path, name: str, port: int, *, dtype: str, max_model_len: int, adapters: dict[str, Path]
) -> list[str]:
    """`vllm serve` on 127.0.0.1; `adapters` maps served LoRA names to PEFT adapter directories."""
    argv = [str(vllm), "serve", str(model_dir), "--served-model-name", name, "--dtype", dtype]
    argv += ["--max-model-len", str(max_model_len), "--host", "127.0.0.1", "--port", str(port)]
    if adapters:
        rank = max(json.loads((p / "adapter_config.json").read_text())["r"] for p in adapters.values())
        argv += ["--enable-lora", "--lora-modules", *(f"{n}={p}" for n, p in adapters.items())]
        argv += ["--max-lora-rank", str(max_lora_rank(rank))]
    return argv


def start_server(
    model_dir: Path,
    state_dir: Path,
    *,
    name: str,
    port: int,
    dtype: str = "float32",
    max_model_len: int = 2048,
    kv_cache_gib: int = 1,
    adapter: Path | None = None,
    extra_adapters: dict[str, Path] | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> ServerState:
    """Start vLLM on 127.0.0.1:`port` and return once a 1-token completion succeeded (ServeError otherwise, with
    the log's tail; the process group is stopped). `adapter` is served as NAME-lora, `extra_adapters` by name."""
    model_dir = Path(model_dir).resolve()
    problems = cpu_head_dim_problems(_spec_of(model_dir))
    if problems:
        raise ServeError(f"{model_dir}: vLLM's CPU engine would die at the first request: " + "; ".join(problems))
    vllm = require_vllm()
    state_dir.mkdir(parents=True, exist_ok=True)
    if (state_dir / STATE_FILE).is_file():
        old = read_state(state_dir)
        if _alive(old.pid):
            raise ServeError(f"{state_dir}: a server (pid {old.pid}, port {old.port}) runs: `crosstune serve stop` it")
    log = state_dir / LOG_FILE
    adapters = {f"{name}-lora": Path(adapter).resolve()} if adapter else {}
    adapters.update({n: Path(p).resolve() for n, p in (extra_adapters or {}).items()})
    argv = vllm_argv(vllm, model_dir, name, port, dtype=dtype, max_model_len=max_model_len, adapters=adapters)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)  # the serving venv must not see the training stack's sources
    with open(log, "ab") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    lora_name = f"{name}-lora" if adapter else None
    state = ServerState(proc.pid, port, name, lora_name, str(model_dir), str(log), time.time())
    (state_dir / STATE_FILE).write_text(json.dumps(asdict(state), indent=2) + "\n")
    try:
        wait_ready(state, proc, ready_timeout_s)
    except BaseException:
        stop_server(state_dir)
        raise
    return state


def read_state(state_dir: Path) -> ServerState:
    path = Path(state_dir) / STATE_FILE
    if not path.is_file():
        raise ServeError(f"{path}: no server state (nothing started with `crosstune serve start` here)")
    return ServerState(**json.loads(path.read_text()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0): ask /proc whether it has exited.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def log_tail(state: ServerState, lines: int = 25) -> str:
    try:
        return "\n".join(Path(state.log).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def health(state: ServerState, timeout: float = 5.0) -> str | None:
    """None when the server is up and healthy; otherwise why not (exited, refused, status)."""
    import httpx

    if not _alive(state.pid):
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
    usage = r.json().get("usage") or {}
    return None if usage.get("completion_tokens") == 1 else f"1-token completion returned usage {usage}"


def wait_ready(state: ServerState, proc: subprocess.Popen | None, timeout_s: float) -> None:
    """Poll until /health is 200 and then a 1-token completion (and the adapter's) succeeds; the engine can pass
    /health and die at its first request, so health alone is not readiness."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (proc is not None and proc.poll() is not None) or not _alive(state.pid):
            code = proc.returncode if proc is not None else "?"
            raise ServeError(f"vLLM exited (status {code}) before it was ready; {state.log}:\n{log_tail(state)}")
        if health(state, timeout=2.0) is None:
            why = one_token(state) or (state.lora_name and one_token(state, state.lora_name))
            if not why:
                return
            if (proc is not None and proc.poll() is not None) or health(state, timeout=2.0):
                raise ServeError(f"vLLM died at its first request ({why}); {state.log}:\n{log_tail(state)}")
        time.sleep(1.0)
    raise ServeError(f"vLLM not ready after {timeout_s:.0f} s; {state.log}:\n{log_tail(state)}")


def stop_server(state_dir: Path, grace_s: float = 30.0) -> bool:
    """SIGTERM the server's process group, SIGKILL after `grace_s`; remove the state file. False if none ran."""
    try:
        state = read_state(state_dir)
    except ServeError:
        return False
    running = _alive(state.pid)
    if running:
        _signal_group(state.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _group_alive(state.pid):
            time.sleep(0.2)
            _reap(state.pid)
        if _group_alive(state.pid):
            _signal_group(state.pid, signal.SIGKILL)
    _reap(state.pid)
    (Path(state_dir) / STATE_FILE).unlink(missing_ok=True)
    return running


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    """Any process of the group still running (vLLM's API server, engine core and workers share it)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _reap(pid: int) -> None:
    """Collect our own child's exit status so it doesn't linger as a zombie (no-op for others)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
