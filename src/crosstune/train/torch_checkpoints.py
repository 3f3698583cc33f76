"""The torch backend's checkpoint folders, readable without torch: `<run>/checkpoints/checkpoint-N` (PEFT
adapter + optimizer state, renamed into place whole) and the fixed staging names of half-written ones."""

from __future__ import annotations

import re
from pathlib import Path

STAGING = ".staging"  # checkpoints are written here, then renamed into place (a crash leaves no half checkpoint)
ADAPTER_STAGING = ".adapter.tmp"  # the final adapter, likewise; one fixed name every rank agrees on (collective save)
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoints(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under `ckpt_dir`, oldest first."""
    if not ckpt_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in ckpt_dir.iterdir() if p.is_dir() and (m := CHECKPOINT.match(p.name))]
    return sorted(found)


def checkpoint_step(path: Path) -> int:
    return int(CHECKPOINT.match(Path(path).name).group(1))


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    found = checkpoints(Path(ckpt_dir))
    return found[-1][1] if found else None
