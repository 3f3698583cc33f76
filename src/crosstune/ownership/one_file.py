"""One-file outputs (a job spec, an imported recipe, an exported config): the file proves itself by its last line,
the sha256 of the content written above it."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from crosstune.fsutil import atomic_write_text
from crosstune.ownership.manifests import OutputRefused
from crosstune.ownership.outputs import check_out
from crosstune.units import MIB

MAX_ONE_FILE = 4 * MIB  # a one-file output is a few KB (a spec, a recipe, a config): a bigger file is none of them


@dataclass(frozen=True)
class FileKind:
    """A one-file output that proves itself (a job spec, an imported recipe, an exported config): its last line, a
    comment in the file's own language, names the command and holds the sha256 of every line before it."""

    made_by: str
    comment: str = "#"

    @property
    def stamp(self) -> str:
        return f"{self.comment} {self.made_by} wrote this file; sha256 of the lines above: "


def _split_stamp(text: str, kind: FileKind) -> tuple[str, str | None]:
    body, _, last = text.rstrip("\n").rpartition("\n")
    if last.startswith(kind.stamp):
        return body + "\n", last[len(kind.stamp) :].strip()
    return text, None


def _existing(path: Path, kind: FileKind) -> bytes | str | None:
    """The bytes of the file at `path` (None: nothing there), or why it can't be one of `kind`'s: a link (never
    followed), not a regular file, bigger than any one-file output (never read: a 3 GB file was read whole)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "is a link"
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
        if st.st_size > MAX_ONE_FILE:
            return f"is {st.st_size:,} bytes, more than any file {kind.made_by} writes"
        return f.read(MAX_ONE_FILE + 1)


def file_refusal(path: Path, kind: FileKind, label: str = "--out") -> str | None:
    """Why `kind`'s command may not replace the existing file `path` (None: it is absent, or its own, unchanged).
    Read within MAX_ONE_FILE, without following a link."""
    existing = _existing(Path(path), kind)
    if existing is None:
        return None
    if isinstance(existing, str):
        return f"{label} {path} exists and {existing}; it replaces only what it wrote itself: choose another {label}"
    body, digest = _split_stamp(existing.decode("utf-8", errors="replace"), kind)
    if digest is None:
        why = f"is not a file {kind.made_by} wrote (its last line is not {kind.made_by}'s stamp)"
    elif hashlib.sha256(body.encode()).hexdigest() != digest:
        why = f"has changed since {kind.made_by} wrote it"
    else:
        return None
    return f"{label} {path} exists and {why}; it replaces only what it wrote itself: choose another {label}"


def write_owned_file(path: Path, text: str, kind: FileKind, *, label: str = "--out", error=OutputRefused) -> Path:
    """Write `text` at `path` with `kind`'s stamp last (atomically); `error` before writing when `path` is a folder,
    sits under a file, or is a file its command can't prove it wrote (file_refusal)."""
    path = check_out(path, label=label, error=error, file=True)
    if why := file_refusal(path, kind, label):
        raise error(why)
    text = text if text.endswith("\n") else text + "\n"
    atomic_write_text(path, f"{text}{kind.stamp}{hashlib.sha256(text.encode()).hexdigest()}\n")
    return path
