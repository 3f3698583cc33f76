"""vLLM as a managed subprocess: the model checked first, a free port, its own process group, a state file naming every
process of the server by (boot, PID, start time) (serve.state), and readiness by a real completion answered by the
process started (serve.readiness: a crash detected by process exit or failed health, whatever the exit status — vLLM's
CPU engine dies on an unsupported head size and the server still exits 0).

`stop_server` signals only processes proven to be the ones started (serve.proctree): the whole tree even when the
main process was kill -9'd (vLLM's engine core and workers live on), never a stranger that reused a stale PID."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from crosstune.errors import InputError
from crosstune.fsutil import exclusive_lock, lock_path
from crosstune.model_configs import read_adapter_config, read_model_config
from crosstune.serve import proctree
from crosstune.serve.engine import (
    TEXT_ONLY_FLAG,
    ServeError,
    cpu_head_dim_problems,
    max_lora_rank,
    multimodal_checkpoint,
    require_vllm,
    unified_import_problem,
)
from crosstune.serve.logscan import kv_capacity_in_log
from crosstune.serve.proctree import ProcId
from crosstune.serve.readiness import wait_ready
from crosstune.serve.state import LOG_FILE, STATE_FILE, ServerState, default_state_dir, read_state, write_state

READY_TIMEOUT_S = 300.0  # 30-120 s to /health on 2 loaded cores, plus the first request's compile


def _spec_of(model_dir: Path):
    from crosstune.families import family_of_hf_config

    cfg_path = model_dir / "config.json"
    if not cfg_path.is_file():
        raise ServeError(f"{model_dir}: no config.json (expected an HF model directory: a base or a merged export)")
    cfg = read_model_config(model_dir)
    if not isinstance(cfg, dict):
        raise InputError(f"{cfg_path}: not a JSON object: restore it from the model's source")
    try:
        fam = family_of_hf_config(cfg)
        return fam.spec_from_hf_config(cfg, name=model_dir.name)
    except (KeyError, ValueError, TypeError) as e:
        raise ServeError(f"{cfg_path}: not a config crosstune can serve ({type(e).__name__}: {e})") from None


def check_model_dir(model_dir: Path, *, adapters: bool = False) -> None:
    """Refuse, before anything starts, a model folder vLLM's CPU engine can't serve (config or head size), or
    adapters on a mixture of experts: with --enable-lora vLLM wraps every MoE layer in its LoRA MoE layer
    (vllm/lora/layers/fused_moe.py), which runs the Triton MoE kernels the CPU build lacks (vLLM 0.32's CPU build
    dies at the first request: "triton.language has no attribute float32")."""
    model_dir = Path(model_dir)
    spec = _spec_of(model_dir)
    problems = cpu_head_dim_problems(spec)
    if adapters and spec.moe is not None:
        problems.append(
            "LoRA adapters on a mixture-of-experts model run Triton kernels the CPU build has not: serve the merged "
            "export instead (crosstune export RUN --merged)"
        )
    if problems:
        raise ServeError(f"{model_dir}: vLLM's CPU engine would die at the first request: " + "; ".join(problems))


def vllm_argv(
    vllm: Path,
    model_dir: Path,
    name: str,
    port: int,
    *,
    dtype: str,
    max_model_len: int,
    adapters: dict[str, Path],
    drafter=None,
    text_only: bool = False,
) -> list[str]:
    """`vllm serve` on 127.0.0.1; `adapters` maps served LoRA names to PEFT adapter directories; `drafter` (a
    serve.drafter.Drafter) adds its --speculative-config; `text_only`: a multimodal checkpoint served for text."""
    argv = [str(vllm), "serve", str(model_dir), "--served-model-name", name, "--dtype", dtype]
    argv += ["--max-model-len", str(max_model_len), "--host", "127.0.0.1", "--port", str(port)]
    argv += [TEXT_ONLY_FLAG] if text_only else []
    if adapters:
        rank = max(adapter_rank(p) for p in adapters.values())
        argv += ["--enable-lora", "--lora-modules", *(f"{n}={p}" for n, p in adapters.items())]
        argv += ["--max-lora-rank", str(max_lora_rank(rank))]
    if drafter is not None:
        argv += ["--speculative-config", drafter.config()]
    return argv


def adapter_rank(adapter: Path) -> int:
    """The LoRA rank `r` of a PEFT adapter folder (its adapter_config.json), or a ServeError saying what is wrong."""
    path = Path(adapter) / "adapter_config.json"
    if not path.is_file():
        raise ServeError(
            f"{adapter}: no adapter_config.json (expected a PEFT adapter folder, e.g. an export's adapter)"
        )
    return read_adapter_config(adapter)["r"]


def check_port_free(port: int) -> None:
    """ServeError naming the holder when 127.0.0.1:`port` can't be bound (vLLM binds with SO_REUSEADDR too)."""
    if not 1 <= port <= 65535:
        raise ServeError(f"--port {port}: not a TCP port (1-65535)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return
        except OSError as e:
            reason = e.strerror or str(e)
    owners = proctree.port_owner(port)
    who = "; ".join(f"pid {p.pid}: {p.cmdline[:120]}" for p in owners) or "a process this user can't see"
    raise ServeError(f"port {port} on 127.0.0.1 is in use ({reason}) by {who}: stop it, or pass another --port")


def start_server(
    model_dir: Path,
    state_dir: Path | None = None,
    *,
    name: str,
    port: int,
    dtype: str = "float32",
    max_model_len: int = 2048,
    kv_cache_gib: int = 1,
    adapter: Path | None = None,
    extra_adapters: dict[str, Path] | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
    drafter=None,
) -> ServerState:
    """Start vLLM on 127.0.0.1:`port` and return once a 1-token completion, answered by the process started,
    succeeded. Otherwise ServeError with the log's root cause and path, and everything started is stopped.
    `adapter` is served as NAME-lora, `extra_adapters` by name; `state_dir` defaults to default_state_dir(port);
    `drafter` (serve.drafter.Drafter): speculative decoding."""
    model_dir = Path(model_dir).resolve()
    check_model_dir(model_dir, adapters=bool(adapter or extra_adapters))
    vllm = require_vllm()
    if problem := unified_import_problem(_spec_of(model_dir), vllm):
        raise ServeError(f"{model_dir}: {problem}")
    state_dir = Path(state_dir) if state_dir is not None else default_state_dir(port)
    adapters = {f"{name}-lora": Path(adapter).resolve()} if adapter else {}
    adapters.update({n: Path(p).resolve() for n, p in (extra_adapters or {}).items()})
    argv = vllm_argv(
        vllm,
        model_dir,
        name,
        port,
        dtype=dtype,
        max_model_len=max_model_len,
        adapters=adapters,
        drafter=drafter,
        text_only=multimodal_checkpoint(read_model_config(model_dir)),
    )
    state_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(lock_path(state_dir), f"server state {state_dir}", "another `serve start` is starting it"):
        if (state_dir / STATE_FILE).is_file():
            old = read_state(state_dir)
            running = proctree.tree(old.recorded(), pgid=old.pid)
            if running:
                raise ServeError(
                    f"{state_dir}: a server (pid {old.pid}, port {old.port}) runs: `crosstune serve stop "
                    f"--state-dir {state_dir}` it first"
                )
            (state_dir / STATE_FILE).unlink()  # stale: nothing of it runs any more
        check_port_free(port)
        log = state_dir / LOG_FILE
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "HF_HUB_OFFLINE": "1"}
        env.pop("PYTHONPATH", None)  # the serving venv must not see the training stack's sources
        with open(log, "ab") as fh:
            offset = fh.tell()
            fh.write(f"\n=== crosstune serve start {time.strftime('%Y-%m-%dT%H:%M:%S')}: {' '.join(argv)}\n".encode())
            fh.flush()
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        # Its start time now, its command line once ready (read this early, /proc may show it mid-exec).
        spawned = proctree.identify(proc.pid)
        leader = ProcId(proc.pid, spawned.start if spawned else -1, proctree.boot_id(), "")
        lora_name = f"{name}-lora" if adapter else None
        state = ServerState(
            proc.pid, port, name, lora_name, str(model_dir), str(log), time.time(), leader.to_json(), log_offset=offset
        )
        state.drafter = None if drafter is None else {"model": drafter.model, "tokens": drafter.tokens}
        write_state(state_dir, state)
        try:
            wait_ready(state, proc, ready_timeout_s)
            members = proctree.tree([leader], pgid=proc.pid)
            state.leader = next((p.to_json() for p in members if p.pid == proc.pid), state.leader)
            state.members = [p.to_json() for p in members if p.pid != proc.pid]
            state.kv_cache = kv_capacity_in_log(log, offset)
            write_state(state_dir, state)
        except BaseException:
            _stop_child(proc, leader)
            (state_dir / STATE_FILE).unlink(missing_ok=True)
            raise
    return state


def _stop_child(proc: subprocess.Popen, leader: ProcId, grace_s: float = 30.0) -> None:
    """Stop a server this process started and has not reaped: its whole process group is provably ours."""
    proctree.stop_tree([leader, *proctree.group_members(proc.pid)], grace_s)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass(frozen=True)
class StopOutcome:
    stopped: list[ProcId]  # the processes signalled
    message: str

    def __bool__(self) -> bool:
        return bool(self.stopped)


def stop_server(state_dir: Path, grace_s: float = 30.0) -> StopOutcome:
    """SIGTERM every process of the recorded server still proven to be it (its tree and group), SIGKILL after
    `grace_s`; remove the state file. A PID now held by another process is left alone and said so."""
    try:
        state = read_state(state_dir)
    except ServeError:
        return StopOutcome([], f"no server recorded in {state_dir}")
    path = Path(state_dir) / STATE_FILE
    if state.leader is None:
        raise ServeError(
            f"{path}: recorded by an older crosstune without the processes' start times, so pid {state.pid} can't "
            f"be proven to be the server: check `ps -o pid,lstart,args -g {state.pid}`, stop it yourself, and "
            "delete the file"
        )
    leader = ProcId.from_json(state.leader)
    procs = proctree.tree(state.recorded(), pgid=state.pid)
    if not procs:
        path.unlink(missing_ok=True)
        now = proctree.identify(leader.pid)
        if now is not None:
            return StopOutcome(
                [],
                f"the server recorded in {state_dir} is gone; pid {leader.pid} is now another process "
                f"({now.cmdline[:120]}), left alone; removed the stale {path.name}",
            )
        return StopOutcome([], f"the server recorded in {state_dir} is gone (nothing of it runs); removed {path.name}")
    stopped = proctree.stop_tree(procs, grace_s)
    path.unlink(missing_ok=True)
    pids = ", ".join(str(p.pid) for p in stopped)
    if all(p.pid != leader.pid for p in procs):
        message = (
            f"the server's main process (pid {leader.pid}) was already gone; stopped its {len(stopped)} "
            f"remaining process(es): {pids}"
        )
    else:
        message = f"stopped the server on port {state.port} ({len(stopped)} process(es): {pids})"
    return StopOutcome(stopped, message)
