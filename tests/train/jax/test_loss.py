"""The pieces of a JAX step: attention mask, token-weighted loss weights, schedules equal to transformers'."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("optax")


def test_attention_mask_is_causal_per_document_without_padding():
    import jax.numpy as jnp

    from crosstune.train.jax.loss import attention_mask

    seg = jnp.array([[1, 1, 2, 2, 2, 0]])
    m = np.asarray(attention_mask(seg))[0]
    assert m[1, 0] and not m[0, 1]  # causal
    assert not m[2, 1] and m[4, 2]  # document 2 doesn't see document 1
    assert not m[:, 5].any()  # nobody attends to padding


def _micro(mask_rows: list[list[int]]) -> dict:
    mask = np.array(mask_rows, dtype=bool)
    return {
        "input_tokens": np.ones(mask.shape, np.int32),
        "input_mask": mask,
        "positions": np.tile(np.arange(mask.shape[1]), (mask.shape[0], 1)),
        "segment_ids": np.ones(mask.shape, np.int32),
    }


def test_loss_weights_make_multisteps_mean_token_weighted():
    """MultiSteps averages k micro-batch losses; weights k/N turn that average into Σ token losses / N."""
    from crosstune.train.jax.batches import optimizer_steps

    a = _micro([[0, 1, 1, 1], [0, 0, 0, 1]])  # 4 trained tokens (position 0 is never a target)
    b = _micro([[0, 0, 0, 1], [0, 0, 0, 0]])  # 1 trained token
    (step,) = list(optimizer_steps([a, b], accumulation=2))
    assert [m["step_trained_tokens"] for m in step] == [5, 5] and step[0]["step_tokens"] == 16
    token_losses = [np.array([[0, 1.0, 2.0, 3.0], [0, 0, 0, 4.0]]), np.array([[0, 0, 0, 10.0], [0, 0, 0, 0]])]
    micro_losses = [np.sum(t * m["loss_weight"][:, None]) for t, m in zip(token_losses, step, strict=True)]
    assert np.mean(micro_losses) == pytest.approx((1 + 2 + 3 + 4 + 10) / 5)  # token-weighted
    assert np.mean(micro_losses) != pytest.approx(np.mean([10 / 4, 10 / 1]))  # not the mean of the means


def test_trailing_partial_step_is_dropped():
    from crosstune.train.jax.batches import optimizer_steps

    assert len(list(optimizer_steps([_micro([[0, 1]])] * 5, accumulation=2))) == 2


@pytest.mark.parametrize(
    ("ours", "theirs"), [("cosine", "cosine"), ("linear", "linear"), ("constant", "constant_with_warmup")]
)
def test_schedules_match_transformers(ours, theirs):
    import torch
    from transformers import get_scheduler

    from crosstune.train.jax.optimizer import lr_schedule

    peak, warmup, total = 1e-3, 5, 40
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    sched = get_scheduler(theirs, opt, num_warmup_steps=warmup, num_training_steps=total)
    expected = []
    for _ in range(total):
        expected.append(opt.param_groups[0]["lr"])  # the lr the optimizer step uses
        opt.step()
        sched.step()
    ours_fn = lr_schedule(ours, peak, warmup, total)
    np.testing.assert_allclose([float(ours_fn(s)) for s in range(total)], expected, rtol=1e-5, atol=1e-9)
