"""The report's output folder: written whole into a temp folder beside it and swapped into place (crosstune.fsutil.
staged_dir), with a manifest of what the report wrote. An existing folder is replaced only when it is an earlier
report holding nothing but the files its manifest lists, unchanged; an --out that is or holds an input, or that
names a file, is refused before any work."""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

from crosstune import fsutil
from crosstune.compare.values import CostError

MANIFEST = ".crosstune-report.json"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink())


def check_out(out: Path, inputs: list[Path]) -> None:
    """Refuse an --out that names a file, sits under a file, or would replace one of the report's inputs."""
    for folder in [out, *out.parents]:
        if folder.exists() and not folder.is_dir():
            where = "is a file" if folder == out else f"is inside {folder}, which is a file"
            raise CostError(f"--out {out} {where}: give the report a folder (it is created if missing)")
        if folder.exists():
            break
    refusal = fsutil.overlap_refusal(out, inputs, "report's input")
    if refusal:
        raise CostError(refusal)


def _may_replace(existing: Path) -> None:
    """An earlier report, every file of it listed in its manifest and unchanged; else refused naming what's foreign."""
    try:
        listed = json.loads((existing / MANIFEST).read_text())["files"]
        if not isinstance(listed, dict):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        raise CostError(
            f"--out {existing} is not empty and holds no crosstune report ({MANIFEST}): the report replaces its "
            "folder, so give it a new or empty one"
        ) from None
    foreign = []
    for path in _files(existing):
        rel = path.relative_to(existing).as_posix()
        if rel == MANIFEST:
            continue
        if rel not in listed:
            foreign.append(f"{rel} (not the report's)")
        elif path.is_symlink() or _sha256(path) != listed[rel]:
            foreign.append(f"{rel} (changed since the report wrote it)")
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise CostError(
            f"--out {existing} holds files the report would delete: {shown}; move them out or choose another --out"
        )


@contextlib.contextmanager
def report_folder(out: Path, inputs: list[Path]) -> Iterator[Path]:
    """Yield an empty temp folder; when the block succeeds it becomes `out`, with the manifest of its files."""
    out = Path(out).absolute()
    check_out(out, inputs)
    with fsutil.staged_dir(out, may_replace=_may_replace) as tmp:
        yield tmp
        files = {
            p.relative_to(tmp).as_posix(): _sha256(p) for p in _files(tmp) if p.name != fsutil.MARKER or p.parent != tmp
        }
        manifest = {"made_by": "crosstune report", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "files": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
