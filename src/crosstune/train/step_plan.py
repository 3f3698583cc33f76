"""The step plan both backends train by: rows per optimizer step, gradient accumulation, steps and epochs.

One rule for both (litgpt's global batch): the recipe states `train.global_batch_size` (or per-device batch ×
grad_accumulation); a backend passes its data-parallel width (torch: the GPUs, jax: the fsdp shards) and gets the
accumulation that reaches that global batch. Steps come from `max_steps` (reading as many epochs of the shared row
order as needed) or from `epochs` (whole optimizer steps only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crosstune.errors import BATCH_HINT, BatchPlanError
from crosstune.recipe.schema import Recipe, TrainSection


@dataclass(frozen=True)
class StepPlan:
    micro_batch: int  # rows per micro-batch over all data-parallel devices (per_device_batch_size × width)
    local_batch: int  # rows this process loads per micro-batch
    accumulation: int  # micro-batches per optimizer step
    total_steps: int  # optimizer steps
    epochs_read: int  # whole epochs of the shared row order the run spans
    micro_batches_per_epoch: int

    @property
    def global_batch(self) -> int:
        """Rows per optimizer step over all devices."""
        return self.micro_batch * self.accumulation


def accumulation(train: TrainSection, data_parallel: int) -> int:
    """Micro-batches per optimizer step: from train.global_batch_size when set, else train.grad_accumulation."""
    return train.accumulation(data_parallel)


def plan_steps(train: TrainSection, n_rows: int, data_parallel: int, processes: int = 1) -> StepPlan:
    """The step plan for `n_rows` prepared rows on `data_parallel` devices spread over `processes` processes
    (each loads whole rows of its own share)."""
    if data_parallel % processes:
        raise BatchPlanError(
            f"{data_parallel} data-parallel devices must be a multiple of the {processes} processes "
            "(each loads whole rows)"
        )
    micro = train.per_device_batch_size * data_parallel
    local = micro // processes
    k = accumulation(train, data_parallel)
    per_epoch = math.ceil(n_rows / processes) // local
    if per_epoch == 0:
        raise BatchPlanError(f"{n_rows} training rows can't fill one micro-batch of {micro} rows: {BATCH_HINT}")
    total = train.max_steps or int((train.epochs or 1.0) * per_epoch) // k
    if total == 0:
        raise BatchPlanError(
            f"{n_rows} rows give no whole optimizer step of {k} micro-batches × {micro} rows: {BATCH_HINT}"
        )
    return StepPlan(micro, local, k, total, max(1, math.ceil(total * k / per_epoch)), per_epoch)


def warmup_steps(train: TrainSection, total_steps: int) -> int:
    """The schedule's warm-up steps: train.warmup_ratio of the run's steps (rounded up: transformers' rule), else
    train.warmup_steps. Both backends' schedules take it from here."""
    if train.warmup_ratio is not None:
        return math.ceil(train.warmup_ratio * total_steps)
    return train.warmup_steps


def constant_step(recipe: Recipe) -> TrainSection:
    """The recipe's optimizer settings at a constant peak learning rate (no warmup: one probed step moves)."""
    return recipe.train.model_copy(update={"schedule": "constant", "warmup_steps": 0, "warmup_ratio": None})
