"""Paths under a root the user named stay inside it: the one owner of confinement (a problem set, a bucket, a study
bundle, a run directory, a base model an export copies from, the folder a manifest lists names in).

- Reads: `inside(root, path)` resolves `path`; a link (anywhere along it) that leads out of `root` is refused by
  name, in one line: which path, which root, what to do. A link that stays inside is followed.
- Writes and deletes: `no_link_below(root, rel)` refuses a link anywhere below `root` on the way to `rel`, inside or
  out (a write through a link lands elsewhere than its name says); `remove` deletes a file, a link or a folder and
  never follows a link (a link is unlinked, its target left alone).
- Walks: `listing` and `walk_files` never descend into a folder link and never yield what a file link points to.

Python's own tools follow links where this module does not: Path.rglob/glob yield file links (and `*/*` patterns
descend folder links), shutil.copytree copies what links point to, shutil.rmtree refuses a link with an OSError, and
open() reads a link's target. tests/test_confinement.py finds every such use outside this module and says why each
one left is safe.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from crosstune.errors import CrosstuneError

LINK_FIX = "copy the file itself into it, or remove the link"
MAX_PEEK = 10_000  # entries a peek into a folder looks at before it gives up (first_files)


class ConfinementError(CrosstuneError):
    """A path under a root the user named leads out of it, or through a link where none may be."""


def inside(root: Path, path: Path | str, *, label: str, fix: str = LINK_FIX, error=ConfinementError) -> Path:
    """`path` (absolute, or relative to `root`) resolved, when it stays inside `root` (itself resolved: the root may
    be a link the user named); else `error`: "PATH leads out of LABEL ROOT (to TARGET): FIX". A link loop on the way
    is refused the same way ("PATH is a link loop inside LABEL ROOT: FIX")."""
    given = Path(path) if Path(path).is_absolute() else Path(root) / path
    where, base = _resolved(given), _resolved(Path(root))
    if where is None or base is None:
        raise error(f"{given} is a link loop inside {label} {base or root}: {fix}")
    if where != base and base not in where.parents:  # (not leads_out(root, given): a relative `given` is joined again)
        raise error(f"{given} leads out of {label} {base} (to {where}): {fix}")
    return where


def leads_out(root: Path, path: Path | str) -> bool:
    """Whether `path` (absolute, or relative to `root`), resolved, lies outside `root`, resolved (a link loop on the
    way: it leads nowhere inside)."""
    base = _resolved(Path(root))
    where = _resolved(Path(path) if Path(path).is_absolute() else Path(root) / path)
    return base is None or where is None or (where != base and base not in where.parents)


def _resolved(path: Path) -> Path | None:
    """path.resolve(), or None on a link loop (pathlib raises RuntimeError for one, not OSError)."""
    try:
        return path.resolve()
    except RuntimeError:
        return None


def relative_name(name: object) -> str | None:
    """`name` when it is a relative "/"-separated path that stays where it is joined (no `..`, not absolute, no
    backslash or NUL, not empty); else None. For names read from a file (a manifest's list), before any join."""
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        return None
    rel = PurePosixPath(name)
    return None if rel.is_absolute() or ".." in rel.parts or rel == PurePosixPath(".") else name


def no_link_below(root: Path, rel: str, *, label: str, fix: str, error=ConfinementError) -> Path:
    """`root/rel` when no folder or file on the way from `root` to it (`root` itself excluded: the user named it)
    is a link; else `error` naming the link, where it leads and `fix`. For a path about to be written or deleted."""
    root, where = Path(root), Path(root)
    for part in PurePosixPath(rel).parts:
        where = where / part
        if where.is_symlink():
            raise error(f"{where} is a link (to {os.readlink(where)}) inside {label} {root}: {fix}")
    return where


def remove(path: Path) -> None:
    """Delete the file, link or folder at `path` (nothing there: nothing to do); a link is unlinked and never
    followed, and a folder's links are removed as links (shutil.rmtree's own rule below its top)."""
    path = Path(path)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    elif path.exists():  # a pipe, a socket
        path.unlink()


def listing(folder: Path) -> list[str]:
    """Every file and link under `folder`, relative, sorted (folders hold nothing to lose; links not followed)."""
    found = []
    for root, dirs, files in os.walk(folder):
        here = Path(root).relative_to(folder)
        found += [(here / name).as_posix() for name in files]
        found += [(here / name).as_posix() for name in dirs if (Path(root) / name).is_symlink()]
    return sorted(found)


def first_files(folder: Path, root: Path | None = None, limit: int = MAX_PEEK) -> Iterator[Path]:
    """The regular files under `folder`, top-down and sorted within each folder, stopping after `limit` entries
    seen: a peek at what a folder holds (a data folder's first file), which a folder named "/" must not turn into a
    walk of the whole file system. Folder links are never entered; a file link is yielded only when it resolves
    inside `root` (a hub snapshot's files are links into its repo's blobs), else skipped."""
    inside = Path(root).resolve() if root is not None else None
    seen = 0
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not (Path(here) / d).is_symlink())
        for name in sorted(files):
            path = Path(here) / name
            seen += 1
            if seen > limit:
                return
            linked_inside = inside is not None and path.is_symlink() and path.resolve().is_relative_to(inside)
            if (linked_inside or not path.is_symlink()) and path.is_file():
                yield path
        seen += len(dirs)
        if seen > limit:
            return


def walk_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """(relative name, path) of every regular file under `folder`, sorted; links are neither followed nor yielded.
    A `folder` that is itself a link yields nothing: it is not the folder its name says."""
    folder = Path(folder)
    if folder.is_symlink():
        return
    for rel in listing(folder):
        path = folder / rel
        if not path.is_symlink() and path.is_file():
            yield rel, path
