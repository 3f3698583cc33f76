"""A managed server's state file (server.json in its state folder): the server's port, model and log, and every
process of it by (boot, PID, start time), so `serve stop` signals only what it started (serve.proctree). Where state
folders live: one per port under the user's state root."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from crosstune.errors import InputError
from crosstune.fsutil import atomic_write_text
from crosstune.serve.engine import ServeError
from crosstune.serve.proctree import ProcId
from crosstune.untrusted_files import read_json

STATE_FILE = "server.json"
LOG_FILE = "vllm.log"
STATE_ENV = "CROSSTUNE_SERVE_STATE"  # overrides the default state root


def default_state_root() -> Path:
    """Where `serve start` records servers unless --state-dir says otherwise: one place per user, whatever the
    current folder ($CROSSTUNE_SERVE_STATE, else $XDG_STATE_HOME/crosstune/serve, else ~/.local/state/...)."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "crosstune" / "serve"


def default_state_dir(port: int) -> Path:
    """The state folder of the server on 127.0.0.1:`port`: one server per port, so two starts on one port meet."""
    return default_state_root() / f"port-{port}"


@dataclass
class ServerState:
    pid: int  # the main process; also the process group id (start_new_session)
    port: int
    model: str  # the served model name (base)
    lora_name: str | None
    model_dir: str
    log: str
    started: float
    leader: dict | None = None  # ProcId of the main process (absent in state files of older versions)
    members: list[dict] = field(default_factory=list)  # ProcIds of the rest of the group once ready (engine core…)
    log_offset: int = 0  # where this start's output begins in the log (it is appended to)
    # The KV cache the server reported allocating (logscan.kv_capacity: tokens, max concurrency, blocks); None when
    # its log said nothing of it. What the plan estimates is checked against this, not against the flag.
    kv_cache: dict | None = None
    drafter: dict | None = None  # {"model", "tokens"} when it decodes speculatively (serve.drafter)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def recorded(self) -> list[ProcId]:
        return [ProcId.from_json(d) for d in ([self.leader] if self.leader else []) + self.members]


def write_state(state_dir: Path, state: ServerState) -> None:
    atomic_write_text(Path(state_dir) / STATE_FILE, json.dumps(asdict(state), indent=2) + "\n")


def read_state(state_dir: Path) -> ServerState:
    path = Path(state_dir) / STATE_FILE
    if not path.is_file():
        raise ServeError(f"{path}: no server state (nothing started with `crosstune serve start` here)")
    data = read_json(path, "stop the server by its PID yourself and delete the file")
    try:
        return ServerState(**data)
    except TypeError as e:
        raise InputError(f"{path}: not a crosstune server state ({e})") from None


def recorded_servers(root: Path | None = None) -> list[Path]:
    """State folders under the default root (or `root`) that record a server."""
    root = Path(root) if root is not None else default_state_root()
    return sorted(p.parent for p in root.glob(f"*/{STATE_FILE}")) if root.is_dir() else []
