"""Study bundles as the bucket tests make them: a bundle.json of the tiny recipe's torch study with the given stage
statuses, and checkpoints of its run (complete: with their recorded checksums)."""

from __future__ import annotations

from pathlib import Path

from crosstune.run.integrity import record_checksums
from crosstune.study.bundle import new_manifest, write_manifest
from crosstune.study.bundle_schema import BundleManifest, StageEntry

RUN = "runs/tiny-cpu-torch"
STUDY = {"recipe": "tiny-cpu", "backend": "torch"}  # the study a bundle made here records


def checkpoint(run_dir: Path, step: int, complete: bool = True) -> None:
    folder = Path(run_dir) / "checkpoints" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(bytes([step]) * 64)
    if complete:
        record_checksums(folder)


def manifest_of(stages: dict[str, str]) -> BundleManifest:
    """The tiny recipe's torch study's manifest with these stage statuses."""
    manifest = new_manifest(STUDY["recipe"], STUDY["backend"])
    manifest.stages = {name: StageEntry(status=status) for name, status in stages.items()}
    return manifest


def bundle(root: Path, stages: dict[str, str], steps: list[int]) -> None:
    Path(root).mkdir(parents=True, exist_ok=True)
    write_manifest(root, manifest_of(stages))
    for step in steps:
        checkpoint(Path(root) / RUN, step)


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` (links not followed) by relative name: what a test compares before and after."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(Path(root).rglob("*"))
        if p.is_file() and not p.is_symlink()
    }
