"""Filesystem rules every writer shares: outputs appear whole or not at all, temp folders of dead processes are
cleaned, files honour the umask, and one process at a time writes a run or a preparation.

`staged_dir(dest)` is the one "write into a temp folder beside the target, then swap it into place" of crosstune:
the temp folder's name carries this host and PID (`.NAME.tmp-HOST-PID-XXXX`) and it holds its writer's record
(TEMP_WRITER: pid, host, the process's start time), so the next writer in that folder can tell a dead process's
leftovers from a live one's.
The output policy built on it (one manifest shape, one rule for every command's folder) is crosstune.ownership.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from crosstune.errors import CrosstuneError
from crosstune.units import MIB
from crosstune.untrusted_files import read_json

TEMP_WRITER = ".crosstune-tmp.json"  # inside every staged temp folder: its writer (pid, host), for clean-up only
_TEMP = re.compile(r"^\..+\.(tmp|old)-(?P<host>[A-Za-z0-9_.-]+)-(?P<pid>\d+)-[0-9a-f]{8}$")


class LockedError(CrosstuneError):
    """Another live process holds the lock on a run directory or a preparation."""


def say(message: str) -> None:
    """A one-line notice on stderr (stdout stays for results)."""
    print(message, file=sys.stderr, flush=True)


def cache_home() -> Path:
    """crosstune's cache: $CROSSTUNE_CACHE, else $XDG_CACHE_HOME/crosstune, else ~/.cache/crosstune (pretrained
    bases under pretrained/, crash reports under crashes/)."""
    if os.environ.get("CROSSTUNE_CACHE"):
        return Path(os.environ["CROSSTUNE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "crosstune"


# --- permissions --------------------------------------------------------------------------------------------------
def current_umask() -> int:
    """The process umask (read from /proc without changing it; os.umask round trip elsewhere)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def honour_umask(path: Path) -> None:
    """Give `path` (and, for a folder, everything under it) the modes a plain open/mkdir would have had: mkstemp and
    mkdtemp create 0600/0700, which a serving container running as another user can't read."""
    mask = current_umask()
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path):
            for d in dirs:
                if not (Path(root) / d).is_symlink():  # chmod follows a link: its target is not ours
                    os.chmod(Path(root) / d, 0o777 & ~mask)
            for f in files:
                p = Path(root) / f
                if not p.is_symlink():
                    os.chmod(p, _file_mode(p, mask))
        os.chmod(path, 0o777 & ~mask)
    elif path.is_file() and not path.is_symlink():
        os.chmod(path, _file_mode(path, mask))


def _file_mode(path: Path, mask: int) -> int:
    executable = path.stat().st_mode & 0o100
    return (0o777 if executable else 0o666) & ~mask


# --- temp folders of dead processes -------------------------------------------------------------------------------
def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): a PID reused later differs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = _start_time(pid)
    return started is None or now is None or now == started


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"


def clean_stale_temps(parent: Path) -> list[Path]:
    """Remove crosstune temp folders in `parent` left by dead processes of this host (kill -9, power loss), saying
    so. A folder of a live process, of another host, or without crosstune's writer record is left alone."""
    parent, removed = Path(parent), []
    if not parent.is_dir():
        return removed
    for entry in parent.iterdir():
        m = _TEMP.match(entry.name)
        if not m or m["host"] != _host() or not entry.is_dir() or entry.is_symlink():
            continue
        try:
            writer = read_json(entry / TEMP_WRITER)
        except (OSError, ValueError):
            continue  # no writer's record: not provably ours
        if writer.get("pid") != int(m["pid"]) or _alive(int(m["pid"]), writer.get("started")):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        say(f"[cleanup] removed {entry}: a temp folder left by process {m['pid']}, which is gone")
        removed.append(entry)
    return removed


def _temp_beside(dest: Path, kind: str) -> Path:
    tmp = dest.parent / f".{dest.name}.{kind}-{_host()}-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    (tmp / TEMP_WRITER).write_text(
        json.dumps({"pid": os.getpid(), "host": _host(), "started": _start_time(os.getpid())})
    )
    return tmp


def overlap_refusal(dest: Path, sources: Iterable[Path], what: str) -> str | None:
    """Why `dest` may not be replaced — it is, or holds, one of `sources` (the command's `what`, e.g. "export's
    source"), which replacing it would delete — or None when that is safe. Links are followed."""
    dest = Path(dest).resolve()
    for source in sources:
        src = Path(source).resolve()
        if dest == src or dest in src.parents:
            verb = "is" if dest == src else "contains"
            return f"--out {dest} {verb} the {what} {src}: writing there would replace it; choose an --out outside it"
    return None


@contextlib.contextmanager
def temp_beside(dest: Path) -> Iterator[Path]:
    """An empty temp folder beside `dest` for the block (a bucket's copy checked before it is moved in), removed
    when the block ends; a dead process's is cleaned by the next writer there, as staged_dir's are."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(dest.parent)
    tmp = _temp_beside(dest, "tmp")
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # our own temp folder, made above: never a link


@contextlib.contextmanager
def staged_dir(dest: Path, *, may_replace: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Yield an empty temp folder beside `dest`; when the block succeeds it becomes `dest` (modes per the umask),
    on any error it is removed. An existing `dest` is replaced only after `may_replace(dest)` returned (it raises to
    refuse); without it an existing non-empty `dest` is an error. Stale temp folders beside `dest` are cleaned first.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(dest.parent)
    if dest.exists() and not dest.is_dir():
        raise CrosstuneError(f"{dest} exists and is not a folder: choose another path or remove it")
    if dest.is_dir() and any(dest.iterdir()):  # refused before any work is done
        if may_replace is None:
            raise CrosstuneError(f"{dest} is not empty: choose another path")
        may_replace(dest)
    tmp = _temp_beside(dest, "tmp")
    try:
        yield tmp
        (tmp / TEMP_WRITER).unlink()
        honour_umask(tmp)
        if dest.exists():
            old = _temp_beside(dest, "old")
            os.replace(dest, old / dest.name)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when the swap happened


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file + rename so a crash never leaves a half-written file; the mode honours the umask."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in chunks (weights of many GB)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


# --- one writer at a time -----------------------------------------------------------------------------------------
LOCKS_ENV = "CROSSTUNE_LOCKS"  # moves the folder of private locks


def private_locks() -> Path:
    """This user's folder of locks, private to them (crosstune's per-user state): $CROSSTUNE_LOCKS, else
    $XDG_RUNTIME_DIR/crosstune-locks, else crosstune-locks-UID in the temp folder; made mode 0700, and refused unless
    it is a real folder (no link), owned by this user and closed to everyone else. A shared folder of predictable
    names let another user of a login node plant a link where a lock would be opened, and the opening truncated the
    link's target."""
    if os.environ.get(LOCKS_ENV):
        folder = Path(os.environ[LOCKS_ENV])
    elif os.environ.get("XDG_RUNTIME_DIR"):
        folder = Path(os.environ["XDG_RUNTIME_DIR"]) / "crosstune-locks"
    else:
        folder = Path(tempfile.gettempdir()) / f"crosstune-locks-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700, parents=True)
    st = folder.lstat()
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
        return folder
    kind = f"owned by uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}"
    kind = "a link" if stat.S_ISLNK(st.st_mode) else kind if stat.S_ISDIR(st.st_mode) else "not a folder"
    what_to_do = f"remove it (or set {LOCKS_ENV} to a folder of yours) and rerun"
    raise CrosstuneError(f"{folder}: crosstune's private lock folder is {kind}, not this user's alone: {what_to_do}")


def lock_path(target: Path) -> Path:
    """A lock file for a `target` that may not exist yet, outside it (a failed run then leaves nothing beside it):
    in this user's private lock folder, named by the target's absolute path. One host's processes see it."""
    key = hashlib.sha256(str(Path(target).resolve()).encode()).hexdigest()[:24]
    return private_locks() / f"{Path(target).name[:100]}-{key}.lock"


@contextlib.contextmanager
def exclusive_lock(lock_file: Path, what: str, hint: str) -> Iterator[None]:
    """Hold an exclusive flock on `lock_file` for the block. The kernel drops it when the process dies (kill -9
    included), so a lock is never stale. Held elsewhere: LockedError naming the holder's PID and host. The file is
    opened without following a link (O_NOFOLLOW) and must be a regular file of this user's; it is written only once
    the lock is held."""
    lock_file = Path(lock_file)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        why = "is a link; a lock is never opened through one: remove the link and rerun"
        raise CrosstuneError(f"{lock_file}: the lock of {what} {why}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            why = "is not a regular file of this user's: remove it and rerun"
            raise CrosstuneError(f"{lock_file}: the lock of {what} {why}")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            raise LockedError(f"{what} is in use by {holder} ({lock_file}): {hint}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"PID {os.getpid()} on host {socket.gethostname()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


# --- what the files at a path are ---------------------------------------------------------------------------------
# Files this big are known by size and mtime: hashing a 60 GB checkpoint on every rerun would take minutes, and
# rewriting a file moves its mtime. Smaller ones (config, index, tokenizer, problem and data files) by sha256, so an
# edit that keeps the size is seen and a copy keeps its fingerprint.
STAT_ONLY_BYTES = 64 * MIB


def files_fingerprint(path: Path, stat_only_bytes: int = STAT_ONLY_BYTES) -> dict[str, str]:
    """{relative name: "sha256:…" or "size=… mtime_ns=…"} of the file at `path`, or of every file under the folder
    `path` (hidden names left out: caches and locks). Names, not places: a moved folder keeps its fingerprint."""
    path = Path(path)
    if path.is_file():
        named = [(path.name, path)]
    else:
        named = [(f.relative_to(path).as_posix(), f) for f in sorted(path.rglob("*")) if f.is_file()]
        named = [(rel, f) for rel, f in named if not any(part.startswith(".") for part in rel.split("/"))]
    out: dict[str, str] = {}
    for rel, f in named:
        st = f.stat()
        big = st.st_size >= stat_only_bytes
        out[rel] = f"size={st.st_size} mtime_ns={st.st_mtime_ns}" if big else f"sha256:{file_sha256(f)}"
    return out
