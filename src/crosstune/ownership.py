"""The output policy of every command: one manifest shape and one rule.

The rule: a command replaces only files it wrote, which it proves by its manifest (each file listed with its sha256
and size, unchanged); anything else in its way is refused before any work, naming the file. A folder swapped into
place whole (`owned_output`: data prepare, export, bench serve, report, model tiny/build) is in the way entirely; a
command writing beside others' files (`owned_files`: the evaluator and its growing cache) only at its own names.

The shape, one JSON file at the folder's top whose name each command keeps (export_manifest.json, ...):

    {"format": 1, "made_by": "crosstune export", "created": "2025-...+0000",
     "files": {"merged/config.json": {"sha256": "...", "bytes": 1234}, ...},
     ...the command's own fields beside them (export: kind, source; a sweep: endpoint, model, complete)}

plus, while `owned_files` writes, "writing": the names claimed by a run in progress (a kill -9 leaves them: the
next run takes them as its own). Manifests written before this shape are read through each command's `legacy`.

Two more kinds of output keep the same rule with the proof where their command keeps it: a folder resumed in place
rather than swapped (`claim`: a study bundle, a run directory, the demo's folder; its manifest is the command's own
file, bundle.json, run.json, demo.json, read by the command's reader; within it a redo removes only what that
manifest lists, `unlisted`), and a one-file output (`write_owned_file`: a job spec), whose last line carries the
sha256 of the rest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstune.confinement import leads_out, listing, relative_name
from crosstune.errors import CrosstuneError
from crosstune.fsutil import TEMP_WRITER, atomic_write_text, file_sha256, overlap_refusal, staged_dir
from crosstune.untrusted_files import read_json

MANIFEST_FORMAT = 1
_SHAPE = ("format", "made_by", "created", "files", "writing")  # the shape's keys; a command adds its own beside them
_SHOWN = 5  # files named per reason in a refusal


class OutputRefused(CrosstuneError):
    """An output folder holds files its command can't prove it wrote (the message names them), or is misplaced."""


@dataclass(frozen=True)
class OutputKind:
    """One command's outputs: who makes them (`made_by`, recorded in the manifest) and the manifest's file name at
    the folder's top. `legacy(manifest, folder)` turns a manifest written before this shape into it (None: not
    one); `parts` are sub-folders that may each hold their own manifest instead (export's adapter/ and merged/)."""

    made_by: str
    manifest: str
    legacy: Callable[[dict, Path], dict | None] | None = None
    parts: tuple[str, ...] = ()


def write_manifest(
    folder: Path, kind: OutputKind, fields: Mapping[str, Any] | None = None, hashes: Mapping[str, str] | None = None
) -> Path:
    """Write `kind.manifest` in `folder`, listing every file under it (sha256 and size; `hashes` gives the sha256 of
    files the writer already hashed) beside the command's own `fields` (export's source, a sweep's endpoint...)."""
    folder, hashes = Path(folder), dict(hashes or {})
    files = {}
    for rel in listing(folder):
        path = folder / rel
        if rel in (kind.manifest, TEMP_WRITER) or path.is_symlink():
            continue  # a link is never listed: the next run refuses it rather than follow it
        files[rel] = _entry(path, hashes.get(rel))
    return _write(folder, kind, files, fields)


def _entry(path: Path, sha256: str | None = None) -> dict[str, Any]:
    return {"sha256": sha256 or file_sha256(path), "bytes": path.stat().st_size}


def _write(
    folder: Path, kind: OutputKind, files: dict, fields: Mapping[str, Any] | None, writing=(), created: str = ""
) -> Path:
    fields = dict(fields or {})
    if clash := sorted(set(fields) & set(_SHAPE)):
        raise ValueError(f"{kind.made_by}'s manifest fields {clash} would hide the shape's own")
    created = created or time.strftime("%Y-%m-%dT%H:%M:%S%z")
    manifest = {"format": MANIFEST_FORMAT, "made_by": kind.made_by, "created": created, "files": files, **fields}
    if writing:
        manifest["writing"] = sorted(writing)
    path = Path(folder) / kind.manifest
    atomic_write_text(path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return path


def read_manifest(folder: Path, kind: OutputKind) -> tuple[dict | None, str]:
    """`folder`'s manifest of `kind` in the one shape (an older one converted by `kind.legacy`; files listed by name
    only carry sha256 None), or None and why it is not one."""
    path = Path(folder) / kind.manifest
    if not path.is_file() or path.is_symlink():
        return None, f"no {kind.manifest} lists it"
    try:
        manifest = read_json(path)
    except (OSError, ValueError):
        return None, f"its {kind.manifest} is unreadable"
    if isinstance(manifest, dict) and "made_by" not in manifest and kind.legacy is not None:
        manifest = kind.legacy(manifest, Path(folder))
    if not isinstance(manifest, dict) or manifest.get("made_by") != kind.made_by:
        return None, f"its {kind.manifest} is not {kind.made_by}'s"
    raw, files = manifest.get("files"), {}
    if not isinstance(raw, (list, dict)):
        return None, f"its {kind.manifest} lists no files"
    writing = manifest.get("writing") if isinstance(manifest.get("writing"), list) else []
    for rel in [*raw, *writing]:  # a name that leaves the folder (crosstune.confinement): not our manifest
        if relative_name(rel) is None or leads_out(folder, rel):
            return None, f"its {kind.manifest} lists {rel!r}, which is not a name inside {folder}"
    for rel in raw:  # older shapes: a list of names (sha256 None), {name: sha256}
        entry = raw[rel] if isinstance(raw, dict) else None
        entry = entry if isinstance(entry, dict) else {"sha256": entry if isinstance(entry, str) else None}
        files[str(rel)] = {"sha256": entry.get("sha256"), "bytes": entry.get("bytes")}
    return {**manifest, "files": files}, ""


def restamp(folder: Path, kind: OutputKind, names: Iterable[str]) -> None:
    """Record the sha256 and size `names` have now in `folder`'s manifest: the command that made the folder has
    rewritten them in place (`data stats`). A manifest in an older shape (files known by name) is left as it is."""
    folder = Path(folder)
    manifest, _ = read_manifest(folder, kind)
    raw = read_json(folder / kind.manifest) if manifest is not None else {}
    if raw.get("made_by") != kind.made_by:
        return
    files = manifest["files"] | {rel: _entry(folder / rel) for rel in names if (folder / rel).is_file()}
    fields = {key: value for key, value in raw.items() if key not in _SHAPE}
    _write(folder, kind, files, fields, created=raw.get("created", ""))


def changed(folder: Path, kind: OutputKind, rel: str) -> str | None:
    """Why `rel` in `folder` differs from `kind`'s manifest (None: it doesn't, or is unlisted or listed by name)."""
    entry = (read_manifest(Path(folder), kind)[0] or {}).get("files", {}).get(rel)
    return None if entry is None else _changed(Path(folder) / rel, entry, kind)


def _changed(path: Path, entry: dict, kind: OutputKind) -> str | None:
    """Why the listed file at `path` is no longer what the command wrote (None: it is, or its name is all we have)."""
    if path.is_symlink() or not path.is_file():
        return "a link" if path.is_symlink() else "not a file"
    size, digest = entry.get("bytes"), entry.get("sha256")
    if (size is not None and path.stat().st_size != size) or (digest and file_sha256(path) != digest):
        return f"changed since {kind.made_by} wrote it"
    return None


def _unproven(folder: Path, kind: OutputKind, hashes: bool = True, skip: str = "") -> list[tuple[str, str]]:
    """(file, why) for each file under `folder` that `kind`'s manifest does not prove its command wrote (names only
    without `hashes`; `skip`: a top-level name left out); empty: the folder is an earlier output, unchanged."""
    folder = Path(folder)
    manifest, why = read_manifest(folder, kind)
    if manifest is None:  # parts with their own manifests prove themselves; whatever is beside them is not proven
        parts = sorted(e for e in folder.iterdir() if _is_part(e, kind))
        bad = [(rel, why) for rel in listing(folder) if rel.split("/")[0] not in {skip, *(e.name for e in parts)}]
        return bad + [(f"{e.name}/{rel}", reason) for e in parts for rel, reason in _unproven(e, kind, hashes)]
    bad = []
    for rel in listing(folder):
        if rel in (kind.manifest, skip):
            continue
        entry = manifest["files"].get(rel)
        if entry is None:
            bad.append((rel, "a link" if (folder / rel).is_symlink() else f"not in its {kind.manifest}"))
        elif hashes and (problem := _changed(folder / rel, entry, kind)):
            bad.append((rel, problem))
    return bad


def _is_part(entry: Path, kind: OutputKind) -> bool:
    return entry.name in kind.parts and entry.is_dir() and not entry.is_symlink() and (entry / kind.manifest).is_file()


def _naming(bad: list[tuple[str, str]]) -> str:
    """The files in the way, a few per reason: `a, b (why); c (other why)`."""
    reasons: dict[str, list[str]] = {}
    for rel, why in bad:
        reasons.setdefault(why, []).append(rel)
    return "; ".join(f"{_shown(rels)} ({why})" for why, rels in reasons.items())


def _shown(names: list[str]) -> str:
    return ", ".join(names[:_SHOWN]) + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def refusal(folder: Path, kind: OutputKind, label: str = "--out") -> str | None:
    """Why `kind`'s command may not replace the existing folder `folder`, naming the files in its way; None when
    every file in it is an earlier output of that command, unchanged."""
    bad = _unproven(folder, kind)
    if not bad:
        return None
    return (f"{label} {folder} holds files that are not {kind.made_by}'s output: {_naming(bad)}; it replaces only "
            f"what it wrote itself: move them out or choose another {label}")  # fmt: skip


def verify(folder: Path, kind: OutputKind) -> list[str]:
    """How `folder` differs from its manifest, one "file (why)" each: changed, missing, not listed (empty: none)."""
    folder = Path(folder)
    bad = _unproven(folder, kind)
    manifest, _ = read_manifest(folder, kind)
    bad += [(rel, "missing") for rel in (manifest or {}).get("files", {}) if not (folder / rel).exists()]
    return [f"{rel} ({why})" for rel, why in bad]


def check_out(
    dest: Path,
    *,
    inputs: Iterable[Path] = (),
    what: str = "input",
    label: str = "--out",
    error=OutputRefused,
    file: bool = False,
) -> Path:
    """`dest` made absolute, or `error` before any work: it is, or is inside, a file; or it is or holds one of
    `inputs` (the command's `what`), which replacing it would delete. `file`: the output is one file (a job spec),
    so `dest` may be a file but not a folder, and what is above it must be folders."""
    dest = Path(dest).absolute()
    if file:
        if dest.is_dir():
            raise error(f"{label} {dest} is a folder: give a file name")
        if dest.exists() and not dest.is_file():
            raise error(f"{label} {dest} is not a regular file (a pipe or device): give a file name")
    for folder in list(dest.parents) if file else [dest, *dest.parents]:
        if folder.exists() and not folder.is_dir():
            where = "is a file" if folder == dest else f"is inside {folder}, which is a file"
            give = "give a path in a folder" if file else "give a folder (it is created if missing)"
            raise error(f"{label} {dest} {where}: {give}")
        if folder.exists():
            break
    if why := overlap_refusal(dest, inputs, what):
        raise error(why.replace("--out", label, 1))
    return dest


@contextlib.contextmanager
def owned_output(
    dest: Path,
    kind: OutputKind,
    *,
    inputs: Iterable[Path] = (),
    what: str = "input",
    overwrite: bool = True,
    flag: str = "--overwrite",
    label: str = "--out",
    error=OutputRefused,
) -> Iterator[Path]:
    """Yield an empty temp folder that becomes `dest` when the block succeeds (staged_dir: on any error, or a kill,
    `dest` is as it was); the block writes its manifest(s) with write_manifest. Refused with `error` before the
    block: see check_out; a non-empty `dest` that holds anything but an earlier output of `kind`, unchanged; and an
    earlier output without `overwrite` (`flag` is how the user gives it)."""
    dest = check_out(dest, inputs=inputs, what=what, label=label, error=error)

    def may_replace(existing: Path) -> None:
        manifest, _ = read_manifest(existing, kind)
        earlier = manifest is not None or any(_is_part(e, kind) for e in existing.iterdir())
        if earlier and not overwrite:  # before hashing it: the cheap refusal first
            raise error(f"{label} {existing} holds an earlier output of {kind.made_by}: pass {flag} to replace it, "
                        f"or choose another {label}")  # fmt: skip
        if why := refusal(existing, kind, label):
            raise error(why)

    with staged_dir(dest, may_replace=may_replace) as tmp:
        yield tmp
        if unlisted := [rel for rel, _ in _unproven(tmp, kind, hashes=False, skip=TEMP_WRITER)]:
            raise CrosstuneError(f"{kind.made_by} wrote {unlisted[0]} without listing it in {kind.manifest} (a bug: "
                                 f"please report it); {dest} is as it was")  # fmt: skip


@contextlib.contextmanager
def owned_files(
    folder: Path, kind: OutputKind, names: Iterable[str], *, label: str = "--out", error=OutputRefused
) -> Iterator[Path]:
    """For a command that writes `names` into `folder` in place, beside files it leaves alone (the evaluator: its
    completion cache grows across reruns). Each of `names` already there must be its own by the manifest (as
    pinned, or claimed by a run of it that died writing), else `error` names it. The names are claimed in the
    manifest before the block and pinned (sha256, size) after it, however it ends but a kill."""
    folder, names = check_out(folder, label=label, error=error), sorted(set(names))
    manifest, why = read_manifest(folder, kind)
    files, claimed = (manifest["files"], manifest.get("writing")) if manifest else ({}, [])
    claimed = claimed if isinstance(claimed, list) else []  # read_manifest checked a list's names
    bad = []
    for rel in (n for n in names if (folder / n).exists() or (folder / n).is_symlink()):
        if manifest is None or (rel not in files and rel not in claimed):
            bad.append((rel, why or f"not in its {kind.manifest}"))
        elif rel not in claimed and (problem := _changed(folder / rel, files[rel], kind)):
            bad.append((rel, problem))
    if bad:
        raise error(f"{label} {folder} holds files that are not {kind.made_by}'s output: {_naming(bad)}; it writes "
                    f"only over what it wrote itself: move them out or choose another {label}")  # fmt: skip
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    pinning = sorted({*names, *(c for c in claimed if (folder / c).is_file())})  # a dead run's files are ours too
    files = {rel: entry for rel, entry in files.items() if rel not in pinning and (folder / rel).is_file()}
    _write(folder, kind, files, None, writing=pinning)
    try:
        yield folder
    finally:
        for rel in pinning:
            if (folder / rel).is_file() and not (folder / rel).is_symlink():
                files[rel] = _entry(folder / rel)
        if files:
            _write(folder, kind, files, None)
        else:  # nothing written: leave no trace
            (folder / kind.manifest).unlink(missing_ok=True)
            if made and not any(folder.iterdir()):
                folder.rmdir()


# --- folders resumed in place -------------------------------------------------------------------------------------
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
            raise error(f"{label} {folder} is not empty and holds no {kind.what} (no {kind.manifest}): "
                        f"{_shown(held)}; {kind.made_by} writes only into its own {kind.what}: give a new or empty "
                        "folder")  # fmt: skip
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


# --- one-file outputs ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FileKind:
    """A one-file output that proves itself (a job spec): its last line, a comment in the file's own language,
    names the command and holds the sha256 of every line before it."""

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


def file_refusal(path: Path, kind: FileKind, label: str = "--out") -> str | None:
    """Why `kind`'s command may not replace the existing file `path` (None: it is absent, or its own, unchanged)."""
    path = Path(path)
    if not path.exists():
        return None
    body, digest = _split_stamp(path.read_bytes().decode("utf-8", errors="replace"), kind)
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
