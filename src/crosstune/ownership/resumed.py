"""Folders a command resumes in place rather than swaps (a study bundle, a run directory, the demo's folder): the
command's own manifest proves the folder its own."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstune.confinement import listing
from crosstune.ownership.manifests import OutputRefused, _shown
from crosstune.ownership.outputs import check_out


@dataclass(frozen=True)
class ResumedKind:
    """A folder its command resumes in place rather than swaps (a study bundle, a run directory, the demo's folder):
    it writes its own names there across reruns, and its manifest, in the command's own format, proves the folder
    the command's. `read(folder)` is the command's reader: the manifest, None when there is none, or the command's
    error when the file is not one. `transient`: names that may be there before the manifest (a lock)."""

    made_by: str
    manifest: str
    what: str  # what a user calls the folder: "study bundle", "run directory"
    read: Callable[[Path], Any]
    transient: tuple[str, ...] = ()


def claim(folder: Path, kind: ResumedKind, *, label: str = "--out", error=OutputRefused) -> Any:
    """The manifest of `folder`, an earlier output of `kind`'s command that it resumes, or None for a new or empty
    folder (the command writes its manifest first); `error` before any work when `folder` is, or is inside, a file,
    or holds a file without the manifest, naming where (empty sub-folders hold nothing to lose)."""
    folder = check_out(folder, label=label, error=error)
    manifest = kind.read(folder) if folder.is_dir() else None
    if manifest is None and folder.is_dir():
        held = {rel.split("/")[0] for rel in listing(folder)} - set(kind.transient)  # an empty folder: nothing lost
        if held := sorted(held):
            raise error(
                f"{label} {folder} is not empty and holds no {kind.what} (no {kind.manifest}): "
                f"{_shown(held)}; {kind.made_by} writes only into its own {kind.what}: give a new or empty "
                "folder"
            )
    return manifest


def unlisted(folder: Path, parts: Iterable[str], listed: Iterable[str]) -> list[str]:
    """The files (and links) under `folder`'s `parts` (relative names) that `listed`, what a manifest of a resumed
    folder says its command wrote there, does not name: what a redo that replaces those parts must not remove."""
    folder, known, found = Path(folder), set(listed), []
    for part in parts:
        where = folder / part
        if where.is_symlink() or where.is_file():
            found.append(part)
        elif where.is_dir():
            found += [f"{part}/{rel}" for rel in listing(where)]
    return sorted(rel for rel in found if rel not in known)
