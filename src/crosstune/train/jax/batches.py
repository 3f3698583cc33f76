"""The micro-batches of each optimizer step as the jax trainer is fed them: grouped per step, each row carrying the
loss weight k / N of crosstune.train.jax.loss, and the step's token counts kept on the host."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

STEP_FIELDS = ("input_tokens", "input_mask", "positions", "segment_ids")


def trained_tokens(batch: dict) -> int:
    """Target tokens the loss counts (mask of tokens 1..L-1: token 0 has no prediction)."""
    return int(np.count_nonzero(batch["input_mask"][:, 1:]))


def optimizer_steps(batches: Iterable[dict], accumulation: int, global_sum=lambda x: x) -> Iterator[list[dict]]:
    """Group micro-batches per optimizer step and attach `loss_weight` = k / N_step to every row.

    `global_sum` adds a per-process count over all processes (identity on one host). Yields the k micro-batches
    of each step (a trailing incomplete step is dropped); each carries the step's `step_trained_tokens`,
    `step_tokens` (not padding) and `step_computed_tokens` (every position of every row) too.
    """
    group: list[dict] = []
    for batch in batches:
        group.append({k: np.asarray(batch[k]) for k in STEP_FIELDS})
        if len(group) < accumulation:
            continue
        local = np.array(
            [
                sum(trained_tokens(b) for b in group),
                sum(int(np.count_nonzero(b["segment_ids"])) for b in group),
                sum(int(b["input_tokens"].size) for b in group),  # every position is computed, padding included
            ]
        )
        trained, tokens, computed = (int(x) for x in global_sum(local))
        weight = np.float32(accumulation / max(trained, 1))
        for b in group:
            b["loss_weight"] = np.full(b["input_tokens"].shape[0], weight, dtype=np.float32)
        yield [dict(b, step_trained_tokens=trained, step_tokens=tokens, step_computed_tokens=computed) for b in group]
        group = []


def device_batch(micro: dict) -> dict:
    """The arrays the trainer shards and feeds (the step's token counts stay on the host)."""
    return {k: micro[k] for k in (*STEP_FIELDS, "loss_weight")}
