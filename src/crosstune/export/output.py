"""Export outputs appear whole or not at all: written into a temp directory next to the destination, renamed into
place when complete, with export_manifest.json (sha256 of every file, the source run and step)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from crosstune.export.lora import ExportError

MANIFEST = "export_manifest.json"


@contextlib.contextmanager
def staged_dir(dest: Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty temp directory beside `dest`; on success it replaces `dest`, on any error it is removed."""
    dest = Path(dest).resolve()
    if dest.exists() and not dest.is_dir():
        raise ExportError(f"{dest} exists and is not a directory")
    if dest.is_dir() and any(dest.iterdir()) and not overwrite:
        raise ExportError(f"{dest} is not empty: choose another --out or pass --overwrite")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
        os.replace(dest, old / dest.name)
    os.replace(tmp, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


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
    from crosstune.export.merge import file_sha256

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
