"""The step plan both backends train by (crosstune.train.step_plan): one rule, from a global batch size."""

import pytest

from crosstune.errors import BatchPlanError
from crosstune.recipe.schema import TrainSection
from crosstune.train.step_plan import plan_steps


def test_steps_and_batches_from_epochs_or_max_steps():
    plan = plan_steps(TrainSection(per_device_batch_size=2, grad_accumulation=4, epochs=1.0), 100, data_parallel=2)
    assert (plan.micro_batch, plan.local_batch, plan.micro_batches_per_epoch, plan.total_steps) == (4, 4, 25, 6)
    assert (plan.global_batch, plan.epochs_read) == (16, 1)  # 6 steps × 4 micro-batches fit in one epoch of 25
    plan = plan_steps(TrainSection(per_device_batch_size=1, max_steps=30), 10, data_parallel=2, processes=2)
    assert (plan.local_batch, plan.total_steps, plan.epochs_read) == (1, 30, 6)
    with pytest.raises(ValueError, match="multiple of the 2 processes"):
        plan_steps(TrainSection(), 10, data_parallel=1, processes=2)
    with pytest.raises(BatchPlanError, match="can't fill one micro-batch of 8 rows"):
        plan_steps(TrainSection(per_device_batch_size=4), 7, data_parallel=2)


def test_a_global_batch_moves_between_backends_unchanged():
    """The seed's 31B recipes: 8 rows per step. torch on 2 GPUs accumulates 4 per GPU; jax with fsdp=1 accumulates 8;
    fsdp=4 accumulates 2: every backend steps over the same 8 rows, so the same 100 rows give the same 12 steps."""
    train = TrainSection(per_device_batch_size=1, global_batch_size=8)  # grad_accumulation derived per backend
    plans = {width: plan_steps(train, 100, data_parallel=width) for width in (1, 2, 4, 8)}
    assert {w: p.accumulation for w, p in plans.items()} == {1: 8, 2: 4, 4: 2, 8: 1}
    assert {p.global_batch for p in plans.values()} == {8} and {p.total_steps for p in plans.values()} == {12}
    with pytest.raises(BatchPlanError, match=r"global_batch_size=8 is not a multiple of .* 3 data-parallel"):
        plan_steps(train, 100, data_parallel=3)
    without = TrainSection(per_device_batch_size=1, grad_accumulation=3)
    assert plan_steps(without, 100, data_parallel=2).global_batch == 6  # per-device batch × devices × accumulation


def test_a_warm_up_ratio_is_steps_of_the_run_for_both_backends():
    """train.warmup_ratio becomes ceil(ratio × the run's steps) once the step plan knows them (transformers' rule):
    the one number the torch backend's SFTConfig and the jax backend's schedule both take."""
    from crosstune.train.jax.optimizer import make_optimizer
    from crosstune.train.step_plan import warmup_steps

    train = TrainSection(max_steps=12, learning_rate=1e-3, warmup_ratio=0.1, schedule="constant")
    assert [warmup_steps(train, n) for n in (12, 10, 1)] == [2, 1, 1]
    assert warmup_steps(TrainSection(max_steps=12, warmup_steps=3), 12) == 3
    _, schedule = make_optimizer(train, total_steps=12)
    assert [float(schedule(s)) for s in (0, 1, 2, 5)] == pytest.approx([0.0, 5e-4, 1e-3, 1e-3])
