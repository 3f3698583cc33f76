"""The jax step's optimizer: AdamW with the recipe's schedule, gradient clipping, the grad-norm recorder, and the
block LoRAs of fused k/v einsums kept two independent PEFT LoRAs."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from crosstune.families.lora_layout import fused_block_mask
from crosstune.recipe.schema import TrainSection
from crosstune.train.jax.layer_scan import layer_name
from crosstune.train.jax.lora import LORA_PARAM, param_name
from crosstune.train.step_plan import warmup_steps


def lr_schedule(schedule: str, peak: float, warmup: int, total: int) -> optax.Schedule:
    """Linear warmup from 0, then cosine to 0 / linear to 0 / constant, over `total` optimizer steps: the
    schedules of transformers' get_scheduler (cosine, linear, constant_with_warmup), step for step."""
    warmup = min(warmup, total)
    ramp = optax.linear_schedule(0.0, peak, warmup) if warmup else None
    rest = max(total - warmup, 1)
    tail = {
        "cosine": optax.cosine_decay_schedule(peak, rest),
        "linear": optax.linear_schedule(peak, 0.0, rest),
        "constant": optax.constant_schedule(peak),
    }[schedule]
    return optax.join_schedules([ramp, tail], [warmup]) if ramp else tail


def schedule_values(schedule: optax.Schedule, total_steps: int) -> np.ndarray:
    """The learning rate at optimizer counts 0..total_steps, computed once, on this process's own CPU device:
    evaluated eagerly on a TPU, an optax schedule compiles one small program per jnp op it runs (clip, cos, minimum,
    where, ...) at the first step's metrics and waits on the chip for each (0.7 s of the second step's time on a
    v5e). This process's CPU (jax.local_devices), and under no mesh: in a multi-process run jax.devices() lists the
    other processes' devices first."""
    cpu = jax.local_devices(backend="cpu")[0]
    counts = jax.device_put(np.arange(total_steps + 1), cpu)
    return np.asarray(jax.jit(jax.vmap(schedule), out_shardings=jax.sharding.SingleDeviceSharding(cpu))(counts))


class GradNormState(NamedTuple):
    grad_norm: jax.Array


def record_grad_norm() -> optax.GradientTransformation:
    """Keeps the global norm of the gradients it sees (first in the chain: before clipping; inside MultiSteps it
    sees the accumulated gradient once per optimizer step)."""

    def init(params):
        del params
        return GradNormState(jnp.zeros([], jnp.float32))

    def update(updates, state, params=None):
        del state, params
        return updates, GradNormState(optax.global_norm(updates).astype(jnp.float32))

    return optax.GradientTransformation(init, update)


def keep_block_lora_diagonal(rank: int) -> optax.GradientTransformation:
    """Zero the gradient of every block LoRA's off-diagonal blocks, so that a fused k/v einsum's LoRA stays the two
    independent rank-r PEFT LoRAs it was initialised as (zero gradient -> zero AdamW update, and decay of 0 is 0).
    The mask is built from the shape inside the step (no constants the size of B in the program)."""

    def update(updates, state, params=None):
        del params

        def mask(path, g):
            name, stacked = layer_name(param_name(path))  # a stacked B's mask broadcasts over its groups
            found = LORA_PARAM.search(name)  # the optimizer state may prefix the model's own names
            b = found is not None and found.end() == len(name) and found[4] == "b"
            m = fused_block_mask(found[2], g.shape[stacked:], rank, xp=jnp) if b else None
            return g if m is None else g * m.astype(g.dtype)

        return jax.tree_util.tree_map_with_path(mask, updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def make_optimizer(
    train: TrainSection, total_steps: int, lora_rank: int | None = None
) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """AdamW with the recipe's schedule and hyper-parameters, gradient clipping, and the grad-norm recorder; with
    `lora_rank`, block LoRAs of fused einsums first get their off-diagonal gradients zeroed (so the recorded norm
    is that of the parameters PEFT has)."""
    schedule = lr_schedule(train.schedule, train.learning_rate, warmup_steps(train, total_steps), total_steps)
    parts = [] if lora_rank is None else [keep_block_lora_diagonal(lora_rank)]
    parts.append(record_grad_norm())
    if train.max_grad_norm:
        parts.append(optax.clip_by_global_norm(train.max_grad_norm))
    parts.append(
        optax.adamw(
            schedule, b1=train.adam_beta1, b2=train.adam_beta2, eps=train.adam_eps, weight_decay=train.weight_decay
        )
    )
    return optax.chain(*parts), schedule


def last_grad_norm(opt_state) -> float:
    """The grad norm recorded by the latest optimizer step (works inside optax.MultiSteps and nnx.Optimizer)."""
    found = [
        s
        for s in jax.tree_util.tree_leaves(opt_state, is_leaf=lambda x: isinstance(x, GradNormState))
        if isinstance(s, GradNormState)
    ]
    if not found:
        raise ValueError("no GradNormState in the optimizer state: build the optimizer with make_optimizer")
    value = found[0].grad_norm
    return float(jax.device_get(getattr(value, "value", value)))
