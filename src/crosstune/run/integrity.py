"""Checkpoint integrity for both backends: sha256 of every file, recorded when a checkpoint is complete and
checked before export and resume, plus a plausibility bound on trained LoRA values.

A byte flipped in the middle of a safetensors or Orbax file still parses, and exported as weights of 6e3 … 7e35
with exit 0; the hashes catch any changed byte, the bound catches values no training run can reach (for
checkpoints written before hashes were recorded).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from crosstune.confinement import leads_out, relative_name, walk_files
from crosstune.errors import CrosstuneError
from crosstune.fsutil import atomic_write_text, file_sha256, say
from crosstune.recipe.schema import TrainSection
from crosstune.untrusted_files import read_json

CHECKSUMS = "crosstune_sha256.json"


class CheckpointCorruptError(CrosstuneError):
    """A checkpoint's bytes differ from what was written, or its values can't come from training."""


def record_checksums(folder: Path) -> Path:
    """Write <folder>/crosstune_sha256.json: {relative path: sha256} of every file under `folder` (call it once
    the checkpoint is complete: after the torch save, after Orbax finalised the step). Links are not followed."""
    folder = Path(folder)
    sums = {rel: file_sha256(p) for rel, p in walk_files(folder) if rel != CHECKSUMS}
    path = folder / CHECKSUMS
    atomic_write_text(path, json.dumps({"format": 1, "sha256": sums}, indent=1) + "\n")
    return path


def verify_checksums(folder: Path, what: str) -> bool:
    """Check every file recorded in <folder>/crosstune_sha256.json. False when nothing was recorded (a checkpoint
    of an older crosstune); CheckpointCorruptError naming the first file that is missing or changed."""
    folder = Path(folder)
    path = folder / CHECKSUMS
    if not path.is_file():
        return False
    try:
        sums = read_json(path)["sha256"]
        if not isinstance(sums, dict):
            raise TypeError("sha256 is not an object")
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointCorruptError(f"{path}: unreadable checksum record ({e}); {_restore_hint(what)}") from None
    for rel, digest in sums.items():
        if relative_name(rel) is None or leads_out(folder, rel):  # a record that names a file elsewhere
            raise CheckpointCorruptError(
                f"{path}: lists {rel!r}, which is not a file inside {folder}; {_restore_hint(what)}"
            )
        p = folder / rel
        if not p.is_file():
            hint = _restore_hint(what)
            raise CheckpointCorruptError(f"{p}: missing from the {what} (recorded in {CHECKSUMS}); {hint}")
        if file_sha256(p) != digest:
            raise CheckpointCorruptError(
                f"{p}: its sha256 differs from the one recorded when the {what} was written (the file was changed "
                f"or damaged on disk); {_restore_hint(what)}"
            )
    return True


def verify_saved(folder: Path, what: str, purpose: str) -> None:
    """verify_checksums for `purpose` ("export" or "resume"), saying so when nothing was recorded (an older
    crosstune's checkpoint: export still checks the values, resume can't check anything)."""
    if not verify_checksums(folder, what):
        consequence = "only the values are checked" if purpose == "export" else "not verified"
        say(f"[{purpose}] {folder}: no recorded checksums (an older crosstune): {consequence}")


def _restore_hint(what: str) -> str:
    return f"restore the {what} from a copy, or use another step (export --step N; for --resume, remove this one)"


def lora_magnitude_bound(train: TrainSection, steps: int, init_bound: float = math.sqrt(6)) -> float:
    """The largest |value| a trained LoRA A or B can hold after `steps` optimizer steps of AdamW (both backends).

    Adam's per-element step is at most lr · max(1, (1-β1)/√(1-β2)) (Kingma & Ba 2015, §2.1: the effective step is
    bounded by the step size, or by that ratio when (1-β1) > √(1-β2)); weight decay only shrinks, and warmup and
    decay keep the rate at or below `learning_rate`. Initial values: B = 0; A is uniform in ±√(6/fan_in) (Qwix,
    crosstune's shared init) or ±1/√fan_in (PEFT), both ≤ √6 (`init_bound`).
    So |w| ≤ init_bound + steps · lr · max(1, (1-β1)/√(1-β2)); the 6e3 … 7e35 of a flipped byte are far outside."""
    b1, b2 = train.adam_beta1, train.adam_beta2
    per_step = train.learning_rate * max(1.0, (1 - b1) / math.sqrt(1 - b2))
    return init_bound + max(1, steps) * per_step
