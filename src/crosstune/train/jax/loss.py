"""What one JAX micro-step computes: the attention mask and the loss.

Loss normalisation (crosstune.run.metrics): mean next-token CE over the optimizer step's trained tokens,
token-weighted across gradient-accumulation micro-batches. Tunix's PeftTrainer accumulates with
`optax.MultiSteps`, which AVERAGES the k micro-batch gradients, and reports the mean of the k micro-batch losses.
So each micro-batch carries `loss_weight = k / N` (N = trained tokens of the whole step, all micro-batches, all
processes: crosstune.train.jax.batches) and the loss is the weighted SUM of its token losses:
mean_i (k/N · S_i) = (Σ_i S_i) / N, for the loss and, by linearity, for the gradient. Tunix's default loss instead
divides each micro-batch by its own count.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


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
