"""Export outputs appear whole or not at all (crosstune.ownership.owned_output: a temp folder beside the destination,
swapped into place when complete) and each folder written carries export_manifest.json: the one manifest shape
(sha256 and size of every file) with what was exported (`kind`) from which run and step (`source`). `--to both`
writes adapter/ and merged/, one manifest each. An existing destination is replaced only with `--overwrite`, only
when it is an earlier export, unchanged and holding nothing else."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from crosstune import ownership
from crosstune.errors import validation_line
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


class ExportSource(BaseModel):
    """What was exported (crosstune.export.run_export): the run, its backend and recipe, the step and checkpoint,
    the chat template the run's data was rendered with, and the LoRA merged."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)  # what a newer exporter adds is kept
    run_dir: str
    backend: str
    recipe_hash: str
    chat_template_sha256: str | None
    step: int
    checkpoint: str
    base_model: str
    rank: int
    alpha: float
    targets: list[str]


class ExportManifest(ownership.OwnedManifest):
    kind: str  # adapter or merged
    source: ExportSource


def read_export_manifest(out_dir: Path) -> ExportManifest:
    """`out_dir`'s export_manifest.json, typed; an ExportError naming the file (and the key) when it is not an
    export's."""
    manifest, why = ownership.read_manifest(Path(out_dir), EXPORT)
    path = Path(out_dir) / MANIFEST
    if manifest is None:
        raise ExportError(f"{out_dir}: {why}; export the run again")
    try:
        return ExportManifest.model_validate(manifest.model_dump())
    except ValidationError as e:
        raise ExportError(f"{path}: {validation_line(e)}; export the run again") from None


def verify_manifest(out_dir: Path) -> list[str]:
    """Files whose sha256 or size no longer match export_manifest.json, that are missing or that it does not list,
    one "file (why)" each (empty: all match)."""
    return ownership.verify(Path(out_dir), EXPORT)
