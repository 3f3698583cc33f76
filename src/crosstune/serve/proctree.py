"""Which processes are the server crosstune started, read from Linux's /proc.

A PID alone proves nothing: PIDs wrap within minutes on a busy machine, so a stale state file's PID may name a
stranger. A process is identified by (boot, PID, start time in clock ticks since boot): no two processes of one boot
share it. Its command line is recorded too, to show what a refused PID now runs. The listening socket of a port is
traced to the processes holding it (/proc/net/tcp inode → /proc/PID/fd), so readiness can prove that the server
answering on the port is the one started, not whichever process holds the port.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PROC = Path("/proc")
_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


@dataclass(frozen=True)
class ProcId:
    """One process, as /proc saw it: equal again only for the same process of the same boot."""

    pid: int
    start: int  # clock ticks since boot (/proc/PID/stat field 22)
    boot: str  # /proc/sys/kernel/random/boot_id
    cmdline: str

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> ProcId:
        return cls(int(d["pid"]), int(d["start"]), str(d["boot"]), str(d.get("cmdline", "")))


def boot_id() -> str:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgid, start ticks) of a process, None when it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name in (…) may hold spaces and parentheses
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def cmdline(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def identify(pid: int) -> ProcId | None:
    """The running (not zombie) process `pid`, or None."""
    st = _stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return None
    return ProcId(pid, st[3], boot_id(), cmdline(pid))


def is_running(p: ProcId) -> bool:
    """The very process `p` still runs: same boot, same start time and, when one was recorded, the same command
    line. A reused PID is not it."""
    now = identify(p.pid)
    if now is None or now.start != p.start or now.boot != p.boot:
        return False
    return not p.cmdline or now.cmdline == p.cmdline


def _all_stats() -> dict[int, tuple[str, int, int, int]]:
    out = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None and st[0] not in ("Z", "X"):
            out[int(entry.name)] = st
    return out


def tree(roots: list[ProcId], pgid: int | None = None) -> list[ProcId]:
    """The proven processes among `roots` (still running, same start time) and every running descendant of them;
    with `pgid` and its leader among the proven roots, also every other member of that process group. Recording
    the group's members once the server is ready makes them roots of their own: vLLM's engine core and workers
    outlive a kill -9 of the API server, re-parented away from it."""
    stats = _all_stats()
    proven = {p.pid: now for p in roots if is_running(p) and (now := identify(p.pid)) is not None}
    children: dict[int, list[int]] = {}
    for pid, st in stats.items():
        children.setdefault(st[1], []).append(pid)
    found: dict[int, ProcId] = dict(proven)
    todo = list(proven)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found and (p := identify(child)) is not None:
                found[child] = p
                todo.append(child)
    if pgid is not None and pgid in proven:
        # The group's leader is proven ours: PID `pgid` can't be reused while it runs, so its group is ours.
        for pid, st in stats.items():
            if st[2] == pgid and pid not in found and (p := identify(pid)) is not None:
                found[pid] = p
    return sorted(found.values(), key=lambda p: p.pid)


def group_members(pgid: int) -> list[ProcId]:
    """Every running process of process group `pgid` (unproven: use with a proven leader only)."""
    return [p for pid, st in _all_stats().items() if st[2] == pgid and (p := identify(pid)) is not None]


def signal_proven(procs: list[ProcId], sig: int) -> list[ProcId]:
    """Send `sig` to each process still proven to be the one recorded; returns those signalled."""
    sent = []
    for p in procs:
        if is_running(p):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, sig)
                sent.append(p)
    return sent


def listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP `port` (IPv4 and IPv6, any address)."""
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (PROC / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == _LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def socket_holders(inodes: set[str], pids: list[int] | None = None) -> list[int]:
    """Processes (among `pids`, else all readable ones) holding one of the socket `inodes` open."""
    if not inodes:
        return []
    wanted = {f"socket:[{i}]" for i in inodes}
    holders = []
    for pid in pids if pids is not None else [int(e.name) for e in PROC.iterdir() if e.name.isdigit()]:
        try:
            fds = list((PROC / str(pid) / "fd").iterdir())
        except OSError:
            continue  # gone, or another user's
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(fd) in wanted:
                    holders.append(pid)
                    break
    return holders


def port_owner(port: int) -> list[ProcId]:
    """The readable processes listening on `port` (empty: none, or not ours to see)."""
    return [p for pid in socket_holders(listening_inodes(port)) if (p := identify(pid)) is not None]


def stop_tree(procs: list[ProcId], grace_s: float) -> list[ProcId]:
    """SIGTERM every proven process of `procs`, SIGKILL what is left after `grace_s`; returns those signalled."""
    sent = signal_proven(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(is_running(p) for p in sent):
        time.sleep(0.1)
    signal_proven(sent, signal.SIGKILL)
    return sent
