"""The base of every expected failure: the CLI's top-level handler prints it as a message, never a traceback."""

from __future__ import annotations

import ast
import errno
import io
import linecache
import os
import re
import shutil
import traceback
from pathlib import PurePath
from types import FrameType, TracebackType

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


class CrosstuneError(Exception):
    """An expected failure. The message says what was wrong, where (file:line, YAML path, tensor) and what to do."""

    exit_code = 1

    @property
    def lines(self) -> list[str]:
        """The message as the handler prints it: one line, whatever a path or value in it holds (a file named with a
        newline split a refusal in two). A failure that lists several problems gives a line each (RecipeError)."""
        return [str(self)]


def validation_line(error) -> str:
    """A pydantic ValidationError of a file crosstune reads as one line: the first field's dotted path, what is
    wrong and the value found ("mesh.tp: input should be a valid integer (got '2')"), and how many more there are."""
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"]) or "<root>"
    got = "" if first["type"] == "missing" else f" (got {first['input']!r})"
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{key}: {first['msg'].lower()}{got}{more}"


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


def shown(lines: list[str]) -> str:
    """A failure's lines (CrosstuneError.lines) as the handler prints them: each kept one line."""
    return "\n".join(one_line(line) for line in lines)


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


# Writers that fail as something other than an OSError: torch's zip writer (torch.save: a RuntimeError "[enforce fail
# at inline_container.cc:…] … file write failed" or "unexpected pos"), safetensors (a SafetensorError "Error while
# serializing: I/O error: No space left on device (os error 28)")
_WRITERS = (
    ("torch's zip writer", re.compile(r"inline_container\.cc|PytorchStreamWriter")),
    ("safetensors", re.compile(r"Error while serializing: .*(I/O error|IoError)")),
)
_NO_SPACE = re.compile(r"No space left on device|os error 28\b|StorageFull|Disk quota exceeded|os error 122\b")
_WRITTEN = ("f", "filename", "path", "file", "save_directory", "output_dir", "dest", "target")  # a writer's target
FULL_BELOW = 64 << 20  # bytes free under which a failed write is taken for a full disk


def disk_full_line(where: object | None) -> str:
    """The one line of a full disk (or quota): the path being written, what to do, what is kept."""
    place = one_line(os.fsdecode(where)) if where is not None else "the output folder"
    return (
        f"disk full writing {place}: free space there (or point the output elsewhere) and rerun; "
        "finished outputs and checkpoints are kept and nothing half-written is used (train: add --resume)"
    )


def written_path(e: BaseException) -> object | None:
    """The path a failed write was writing, read off the traceback (innermost frame first): a writer's argument
    (torch.save's `f`, safetensors' `filename`, a path an os call was given), a path or an open file's name."""
    for frame, _ in reversed(list(traceback.walk_tb(e.__traceback__))):
        for name in _WRITTEN:
            value = frame.f_locals.get(name)
            value = getattr(value, "name", None) if isinstance(value, io.IOBase) else value
            if isinstance(value, str | os.PathLike) and str(value):
                return value
    return None


def _free_bytes(path: object) -> int | None:
    folder = os.path.dirname(os.path.abspath(os.fsdecode(path)))
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def write_fault_line(e: BaseException) -> str | None:
    """The one line of a write that failed as another exception than an OSError (torch's zip writer, safetensors):
    a full disk when the writer says so or the disk holding the path has less than FULL_BELOW free, else the failed
    write; both name the path. None for any other exception."""
    who = next((name for name, pattern in _WRITERS if pattern.search(str(e))), None)
    if who is None:
        return None
    where = written_path(e)
    free = _free_bytes(where) if where is not None else None
    if _NO_SPACE.search(str(e)) or (free is not None and free < FULL_BELOW):
        return disk_full_line(where)
    place = one_line(os.fsdecode(where)) if where is not None else "a file"
    reason = one_line(str(e).strip())[:200]
    return f"{place}: writing failed ({who}: {reason}): check the disk holding it (space, quota, errors) and rerun"


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
