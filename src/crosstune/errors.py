"""The base of every expected failure: the CLI's top-level handler prints it as a message, never a traceback."""

from __future__ import annotations

import ast
import errno
import io
import linecache
import os
import re
import traceback
from pathlib import PurePath
from types import FrameType, TracebackType

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


class CrosstuneError(Exception):
    """An expected failure. The message says what was wrong, where (file:line, YAML path, tensor) and what to do."""

    exit_code = 1


class Interrupted(CrosstuneError):
    """Ctrl-C during a long command; the message says what was saved and the command that resumes."""

    exit_code = EXIT_INTERRUPTED


class BatchPlanError(CrosstuneError, ValueError):
    """The recipe's batch (per-device rows × devices × accumulation) needs more rows than the prepared data holds."""


BATCH_HINT = "lower train.per_device_batch_size or train.grad_accumulation, or add training data"


def before_epoch(path: object, what: str, fix: str) -> str:
    """The refusal of an output written before crosstune's format epoch (crosstune.FORMAT_EPOCH): what it is, what to
    do."""
    from crosstune import FORMAT_EPOCH

    return f"{path}: {what}, written before crosstune {FORMAT_EPOCH}'s formats and not read by it: {fix}"


class InputError(CrosstuneError):
    """A file or folder given to crosstune is missing, unreadable or of the wrong kind."""


def one_line(text: str) -> str:
    """`text` with every control character (newlines too) written as its escape, `\\x1b`, `\\n`: a name or value the
    user gave, echoed in a message, can neither break the line nor drive the terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def shown(message: str) -> str:
    """A message as the handler prints it: each of its lines (a recipe's problems are one per line) kept one line."""
    return "\n".join(one_line(line) for line in message.split("\n"))


# What a system call failed doing, by the Python function that made it (os, shutil, pathlib, tempfile, open).
_DOING = {"open": "opening", "read_text": "reading", "read_bytes": "reading", "write_text": "writing",
          "write_bytes": "writing", "touch": "creating", "mkdir": "making the folder", "makedirs": "making the folder",
          "mkdtemp": "making a temp folder", "mkstemp": "making a temp file", "rmtree": "removing the folder",
          "rmdir": "removing the folder", "unlink": "removing", "remove": "removing", "rename": "moving",
          "replace": "moving", "move": "moving", "copy": "copying", "copy2": "copying", "copyfile": "copying",
          "copytree": "copying", "symlink": "making a link", "symlink_to": "making a link", "resolve": "resolving",
          "realpath": "resolving", "stat": "looking it up", "lstat": "looking it up",
          "iterdir": "listing", "scandir": "listing", "listdir": "listing", "walk": "listing", "glob": "listing",
          "rglob": "listing", "chmod": "changing its mode", "utime": "setting its time"}  # fmt: skip
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PATH_LOCALS = ("path", "self", "src", "dst", "name", "file", "filename", "dest", "target")
_HINTS = {
    errno.ENAMETOOLONG: "a name in it is longer than the file system allows (255 bytes): shorten it",
    errno.ENOTDIR: "a part of the path is a file, not a folder: give another path",
    errno.EISDIR: "it is a folder where a file is expected: give a file",
    errno.ELOOP: "a link loop (links pointing at each other): fix or remove the link",
    errno.EACCES: "check its permissions, or give another path",
    errno.EPERM: "check its permissions, or give another path",
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.ENOENT: "check the path",
}


def _frames(tb: TracebackType | None) -> list[FrameType]:
    """The traceback's frames, innermost first, up to and including the innermost of crosstune's own."""
    frames = [f for f, _ in traceback.walk_tb(tb)][::-1]
    mine = next((i for i, f in enumerate(frames) if f.f_code.co_filename.startswith(_PACKAGE)), len(frames) - 1)
    return frames[: mine + 1]


def _doing(e: BaseException) -> tuple[str | None, object]:
    """(what the failed call was doing, a path from its frame) read off the traceback, innermost frame first: a
    function named in _DOING (pathlib's, shutil's), or such a call in the frame's failing line."""
    for frame in _frames(e.__traceback__):
        name = frame.f_code.co_name
        if name not in _DOING:  # a call in C (open, os.mkdir): named in the line that made it
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            name = next((n for n in re.findall(r"(\w+)\(", line) if n in _DOING), None)
        if name is not None:
            path = next((v for k in _PATH_LOCALS if isinstance(v := frame.f_locals.get(k), str | os.PathLike)), None)
            return _DOING[name], path
    return None, None


def os_error_line(e: OSError, doing: str | None = None) -> str:
    """`PATH: what failed (strerror): what to do` for an OSError nobody expected by name; what failed is `doing`,
    else read off the traceback."""
    found, path = _doing(e)
    doing = doing or found
    where = e.filename if e.filename is not None else path
    if where is not None and e.filename2 is not None:
        where = f"{os.fsdecode(where)} → {os.fsdecode(e.filename2)}"
    head = f"{one_line(os.fsdecode(where))}: " if where is not None else ""
    reason = one_line(e.strerror or str(e) or type(e).__name__)
    hint = _HINTS.get(e.errno) if e.errno is not None else None
    failed = f"{doing} failed ({reason})" if doing else reason
    return f"{head}{failed}" + (f": {hint}" if hint else "")


def link_loop_line(e: RuntimeError) -> str | None:
    """pathlib's RuntimeError for a link loop (`Symlink loop from '/x'`) as an OSError's line; None for another."""
    found = re.fullmatch(r"Symlink loop from (.+)", str(e))
    if found is None:
        return None
    try:
        path = ast.literal_eval(found.group(1))
    except (ValueError, SyntaxError):
        path = found.group(1)
    return os_error_line(OSError(errno.ELOOP, os.strerror(errno.ELOOP), path), "resolving")


def undecodable_line(e: UnicodeDecodeError) -> str | None:
    """A UnicodeDecodeError as `FILE: not valid UTF-8 …`, the file found on the traceback (an open file, or the
    path pathlib was reading); None when none is there."""
    for frame in _frames(e.__traceback__):
        for value in frame.f_locals.values():
            name = getattr(value, "name", None) if isinstance(value, io.IOBase) else None
            if isinstance(name, str):
                return f"{one_line(name)}: not valid {e.encoding} ({e.reason}): save it as UTF-8"
        me = frame.f_locals.get("self")
        if isinstance(me, PurePath):
            return f"{one_line(str(me))}: not valid {e.encoding} ({e.reason}): save it as UTF-8"
    return None
