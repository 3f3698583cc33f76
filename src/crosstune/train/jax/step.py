"""What one JAX training step computes: attention mask, loss, input batches grouped per optimizer step, optimizer.

Loss normalisation (crosstune.run.metrics): mean next-token CE over the optimizer step's trained tokens,
token-weighted across gradient-accumulation micro-batches. Tunix's PeftTrainer accumulates with
`optax.MultiSteps`, which AVERAGES the k micro-batch gradients, and reports the mean of the k micro-batch losses.
So each micro-batch carries `loss_weight = k / N` (N = trained tokens of the whole step, all micro-batches, all
processes) and the loss is the weighted SUM of its token losses: mean_i (k/N · S_i) = (Σ_i S_i) / N, for the loss
and, by linearity, for the gradient. Tunix's default loss instead divides each micro-batch by its own count.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from crosstune.recipe.schema import TrainSection

STEP_FIELDS = ("input_tokens", "input_mask", "positions", "segment_ids")


def attention_mask(segment_ids: jax.Array) -> jax.Array:
    """[B, L] segment ids (0 = padding) -> [B, L, L] bool: causal AND same document AND key not padding.
    Tunix adds no causality itself (its sliding layers only intersect a band with this mask)."""
    length = segment_ids.shape[1]
    causal = jnp.tril(jnp.ones((length, length), dtype=bool))
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    return causal[None] & same & (segment_ids != 0)[:, None, :]


def model_inputs(batch: dict) -> dict:
    """PeftTrainer's gen_model_input_fn: the loss function's keyword arguments for one micro-batch."""
    return {k: batch[k] for k in ("input_tokens", "input_mask", "positions", "segment_ids", "loss_weight")}


def token_losses(logits: jax.Array, input_tokens: jax.Array, input_mask: jax.Array) -> jax.Array:
    """Next-token CE of every target position from full logits, 0 where input_mask says the token is not trained:
    [B, L-1] (the reference the chunked loss of crosstune.train.jax.logits is tested against)."""
    logits = logits[:, :-1].astype(jnp.float32)
    targets = input_tokens[:, 1:]
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return (jax.nn.logsumexp(logits, axis=-1) - picked) * input_mask[:, 1:]


def model_mask(model, segment_ids: jax.Array) -> jax.Array:
    """What the model's attention takes: the rows' segment ids for splash attention, else the dense mask."""
    from crosstune.train.jax.attention import uses_splash

    return segment_ids if uses_splash(model) else attention_mask(segment_ids)


def loss_fn(model, input_tokens, input_mask, positions, segment_ids, loss_weight) -> jax.Array:
    """Σ_rows loss_weight[row] · Σ_t CE(row, t): the step's token-weighted mean once MultiSteps averages. The LM
    head and CE run in chunks (crosstune.train.jax.logits): the [B, L, vocab] logits never exist."""
    from crosstune.train.jax.logits import final_hidden
    from crosstune.train.jax.logits import token_losses as chunked_losses

    with final_hidden(model):
        hidden, _ = model(input_tokens, positions, None, model_mask(model, segment_ids))
    return jnp.sum(chunked_losses(model, hidden, input_tokens, input_mask) * loss_weight[:, None])


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


# --- optimizer -----------------------------------------------------------------------------------------------
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


FUSED_LORA_B = {"kv_einsum": 2, "qkv_einsum": 3}  # fused einsum -> its components (crosstune.families.lora_layout)


def _block_diagonal(name: str, shape: tuple[int, ...], rank: int) -> jax.Array | None:
    """0/1 mask of a fused einsum's block LoRA B (c·r, c, ...): 1 on component j's own r rows. None otherwise."""
    module = name.rsplit(".", 2)[-2] if name.endswith(".w_lora_b") else ""
    c = FUSED_LORA_B.get(module)
    if c is None or shape[0] != c * rank or len(shape) < 2 or shape[1] != c:
        return None
    rows, comps = jnp.arange(shape[0])[:, None] // rank, jnp.arange(c)[None, :]
    return (rows == comps).astype(jnp.float32).reshape(shape[:2] + (1,) * (len(shape) - 2))


def keep_block_lora_diagonal(rank: int) -> optax.GradientTransformation:
    """Zero the gradient of every block LoRA's off-diagonal blocks, so that a fused k/v einsum's LoRA stays the two
    independent rank-r PEFT LoRAs it was initialised as (zero gradient -> zero AdamW update, and decay of 0 is 0).
    The mask is built from the shape inside the step (no constants the size of B in the program)."""

    def update(updates, state, params=None):
        del params

        def mask(path, g):
            parts = [getattr(k, "key", getattr(k, "idx", getattr(k, "name", k))) for k in path]
            m = _block_diagonal(".".join(str(p) for p in parts if p != "value"), g.shape, rank)
            return g if m is None else g * m.astype(g.dtype)

        return jax.tree_util.tree_map_with_path(mask, updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def make_optimizer(
    train: TrainSection, total_steps: int, lora_rank: int | None = None
) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """AdamW with the recipe's schedule and hyper-parameters, gradient clipping, and the grad-norm recorder; with
    `lora_rank`, block LoRAs of fused einsums first get their off-diagonal gradients zeroed (so the recorded norm
    is that of the parameters PEFT has)."""
    schedule = lr_schedule(train.schedule, train.learning_rate, train.warmup_steps, total_steps)
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
