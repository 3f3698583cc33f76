"""The one manifest shape every command's output folder carries, and what it proves: each file listed with its
sha256 and size, unchanged (crosstune.ownership's face says the rule)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crosstune.confinement import leads_out, listing, relative_name
from crosstune.errors import CrosstuneError, validation_line
from crosstune.fsutil import TEMP_WRITER, atomic_write_text, file_sha256
from crosstune.untrusted_files import read_json

MANIFEST_FORMAT = 1
_SHAPE = ("format", "made_by", "created", "files", "writing")  # the shape's keys; a command adds its own beside them
_SHOWN = 5  # files named per reason in a refusal


class OutputRefused(CrosstuneError):
    """An output folder holds files its command can't prove it wrote (the message names them), or is misplaced."""


@dataclass(frozen=True)
class OutputKind:
    """One command's outputs: who makes them (`made_by`, recorded in the manifest) and the manifest's file name at
    the folder's top; `parts` are sub-folders that may each hold their own manifest instead (export's adapter/ and
    merged/)."""

    made_by: str
    manifest: str
    parts: tuple[str, ...] = ()


class FileEntry(BaseModel):
    """One listed file: its sha256 and size when written (None: an older shape listed it by name alone)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    sha256: str | None
    bytes: int | None


class OwnedManifest(BaseModel):
    """A manifest in the one shape, read (read_manifest): who made the folder, its files, and those a run of the
    command claimed while writing them (`writing`); a command's own fields (export's kind and source...) are kept
    as extras, typed by the command's subclass (crosstune.export.export_folder.ExportManifest)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    made_by: str
    files: dict[str, FileEntry]
    writing: list[str] = Field(default_factory=list)
    format: int | None = None  # None: an older shape, without it
    created: str | None = None

    def fields(self) -> dict[str, Any]:
        """The command's own fields, beside the shape's."""
        return {key: value for key, value in (self.model_extra or {}).items() if key not in _SHAPE}


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


def read_manifest(folder: Path, kind: OutputKind) -> tuple[OwnedManifest | None, str]:
    """`folder`'s manifest of `kind` in the one shape (files listed by name only carry sha256 None), or None and
    why it is not one."""
    path = Path(folder) / kind.manifest
    if not path.is_file() or path.is_symlink():
        return None, f"no {kind.manifest} lists it"
    try:
        manifest = read_json(path)
    except (OSError, ValueError):
        return None, f"its {kind.manifest} is unreadable"
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
    try:
        return OwnedManifest.model_validate({**manifest, "files": files, "writing": writing}), ""
    except ValidationError as e:
        return None, f"its {kind.manifest}: {validation_line(e)}"


def restamp(folder: Path, kind: OutputKind, names: Iterable[str]) -> None:
    """Record the sha256 and size `names` have now in `folder`'s manifest: the command that made the folder has
    rewritten them in place (`data stats`). A manifest in an older shape (files known by name) is left as it is."""
    folder = Path(folder)
    manifest, _ = read_manifest(folder, kind)
    if manifest is None:
        return
    files = {rel: entry.model_dump() for rel, entry in manifest.files.items()}
    files |= {rel: _entry(folder / rel) for rel in names if (folder / rel).is_file()}
    _write(folder, kind, files, manifest.fields(), created=manifest.created or "")


def changed(folder: Path, kind: OutputKind, rel: str) -> str | None:
    """Why `rel` in `folder` differs from `kind`'s manifest (None: it doesn't, or is unlisted or listed by name)."""
    manifest, _ = read_manifest(Path(folder), kind)
    entry = manifest.files.get(rel) if manifest is not None else None
    return None if entry is None else _changed(Path(folder) / rel, entry, kind)


def _changed(path: Path, entry: FileEntry, kind: OutputKind) -> str | None:
    """Why the listed file at `path` is no longer what the command wrote (None: it is, or its name is all we have)."""
    if path.is_symlink() or not path.is_file():
        return "a link" if path.is_symlink() else "not a file"
    size, digest = entry.bytes, entry.sha256
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
        entry = manifest.files.get(rel)
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
    return (
        f"{label} {folder} holds files that are not {kind.made_by}'s output: {_naming(bad)}; it replaces only "
        f"what it wrote itself: move them out or choose another {label}"
    )


def verify(folder: Path, kind: OutputKind) -> list[str]:
    """How `folder` differs from its manifest, one "file (why)" each: changed, missing, not listed (empty: none)."""
    folder = Path(folder)
    bad = _unproven(folder, kind)
    manifest, _ = read_manifest(folder, kind)
    listed = manifest.files if manifest is not None else {}
    bad += [(rel, "missing") for rel in listed if not (folder / rel).exists()]
    return [f"{rel} ({why})" for rel, why in bad]
