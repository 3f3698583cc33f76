"""Export outputs appear whole or not at all: written into a temp directory next to the destination, renamed into
place when complete, with export_manifest.json (sha256 of every file, the source run and step)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from crosstune import fsutil
from crosstune.export.merge import file_sha256
from crosstune.run.lora import ExportError

MANIFEST = "export_manifest.json"


@contextlib.contextmanager
def staged_dir(dest: Path, overwrite: bool = False, sources: Sequence[Path] = ()) -> Iterator[Path]:
    """Yield an empty temp directory beside `dest`; on success it replaces `dest`, on any error it is removed.

    `dest` may not equal or contain any of `sources` (the run, the base model): replacing it would delete them. An
    existing non-empty `dest` is replaced only with `overwrite` and only when it is itself an earlier export."""
    dest = Path(dest).resolve()
    refusal = fsutil.overlap_refusal(dest, sources, "export's source")
    if refusal:
        raise ExportError(refusal)

    def may_replace(existing: Path) -> None:
        if not overwrite:
            raise ExportError(f"{existing} is not empty: choose another --out or pass --overwrite")
        if not is_export(existing):
            raise ExportError(
                f"{existing} is not an earlier export (no {MANIFEST}): --overwrite only replaces exports; "
                "choose another --out or empty it yourself"
            )

    with fsutil.staged_dir(dest, may_replace=may_replace) as tmp:
        yield tmp


def is_export(folder: Path) -> bool:
    """An earlier `crosstune export` output: a manifest at the top (adapter, merged), or only adapter/ and merged/
    folders that each have one (both)."""
    folder = Path(folder)
    if (folder / MANIFEST).is_file():
        return True
    entries = list(folder.iterdir())
    return bool(entries) and all(e.name in ("adapter", "merged") and (e / MANIFEST).is_file() for e in entries)


def write_manifest(out_dir: Path, kind: str, hashes: dict[str, str], source: dict) -> Path:
    """export_manifest.json: what was exported from which run and step, and the sha256 + size of every file."""
    out_dir = Path(out_dir)
    manifest = {
        "format": 1,
        "kind": kind,
        "source": source,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": {name: {"sha256": h, "bytes": (out_dir / name).stat().st_size} for name, h in sorted(hashes.items())},
    }
    path = out_dir / MANIFEST
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return path


def verify_manifest(out_dir: Path) -> list[str]:
    """Files whose sha256 or size no longer match export_manifest.json (empty: all match)."""

    out_dir = Path(out_dir)
    manifest = json.loads((out_dir / MANIFEST).read_text())
    bad = []
    for name, entry in manifest["files"].items():
        p = out_dir / name
        if not p.is_file():
            bad.append(f"{name}: missing")
        elif p.stat().st_size != entry["bytes"] or file_sha256(p) != entry["sha256"]:
            bad.append(f"{name}: contents changed")
    return bad
