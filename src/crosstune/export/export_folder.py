"""Export outputs appear whole or not at all (crosstune.ownership.owned_output: a temp folder beside the destination,
swapped into place when complete) and each folder written carries export_manifest.json: the one manifest shape
(sha256 and size of every file) with what was exported (`kind`) from which run and step (`source`). `--to both`
writes adapter/ and merged/, one manifest each. An existing destination is replaced only with `--overwrite`, only
when it is an earlier export, unchanged and holding nothing else."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from crosstune import ownership
from crosstune.run.lora_weights import ExportError

MANIFEST = "export_manifest.json"
PARTS = ("adapter", "merged")


EXPORT = ownership.OutputKind("crosstune export", MANIFEST, parts=PARTS)


@contextlib.contextmanager
def staged_dir(dest: Path, overwrite: bool = False, sources: Sequence[Path] = ()) -> Iterator[Path]:
    """Yield an empty temp directory beside `dest`; on success it replaces `dest`, on any error it is removed.

    `dest` may not equal or contain any of `sources` (the run, the base model): replacing it would delete them. An
    existing non-empty `dest` is replaced only with `overwrite` and only when it is itself an earlier export."""
    with ownership.owned_output(
        dest, EXPORT, inputs=sources, what="export's source", overwrite=overwrite, error=ExportError
    ) as tmp:
        yield tmp


def write_manifest(out_dir: Path, kind: str, hashes: dict[str, str], source: dict) -> Path:
    """export_manifest.json: what was exported (`kind`) from which run and step, and the sha256 + size of every
    file (`hashes`: those the export computed while writing)."""
    return ownership.write_manifest(out_dir, EXPORT, {"kind": kind, "source": source}, hashes)


def verify_manifest(out_dir: Path) -> list[str]:
    """Files whose sha256 or size no longer match export_manifest.json, that are missing or that it does not list,
    one "file (why)" each (empty: all match)."""
    return ownership.verify(Path(out_dir), EXPORT)
