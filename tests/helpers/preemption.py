"""Preemption drills: when a complete checkpoint reached the bucket, and a resumed training's final LoRA against an
uninterrupted one's (the tolerance, why, and its teeth)."""

from __future__ import annotations

import numpy as np

from crosstune.run.integrity import verify_checksums
from crosstune.run.layout import step_folders
from crosstune.run.lora_weights import read_peft_adapter

LR = 2.0e-3  # recipes/tiny-cpu.yaml's train.learning_rate (its peak: warmup then cosine)
# Both runs are processes with the same thread settings running the same ops on the same rows from the same
# state (the checkpoint holds the LoRA, AdamW's moments and the step in fp32): any difference is fp32 rounding in
# threaded reductions, a relative ~1e-7 of each update, and AdamW's update per element is at most about LR
# (its normalised step, Kingma & Ba §2.1). A lost or repeated step moves some element by about LR; rounding moves
# none by more than a few 1e-7 · LR per step. LR/100 lies between the two by orders of magnitude.
ATOL = LR / 100


def complete_checkpoint_in(run_dir) -> bool:
    """Whether the (bucket's copy of a) run holds a checkpoint whose recorded checksums verify."""
    try:
        return any(verify_checksums(folder, "checkpoint") for folder in step_folders(run_dir).values())
    except Exception:  # a file half copied: not yet
        return False


def final_lora(run_dir) -> dict[str, np.ndarray]:
    lora, _ = read_peft_adapter(run_dir / "adapter")
    return {f"{m}.{ab}": np.asarray(w) for m, pair in lora.modules.items() for ab, w in zip("AB", pair, strict=True)}


def largest_difference(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> float:
    assert got.keys() == want.keys()
    return max(float(np.max(np.abs(got[k] - want[k]))) for k in want)


def moved_since(run_dir, step: int, final: dict[str, np.ndarray]) -> float:
    """How far the steps after `step` moved the LoRA (the comparison's teeth: far more than ATOL)."""
    from crosstune.train.session import read_run_lora

    lora = read_run_lora(run_dir, step).lora
    then = {f"{m}.{ab}": np.asarray(w) for m, pair in lora.modules.items() for ab, w in zip("AB", pair, strict=True)}
    return largest_difference(final, then)
