"""The jax step's cross-entropy without the [B, L, vocab] fp32 logits: the LM head and the loss in chunks of the
sequence, the gradient computed in the same pass.

Tunix's model ends with `logits = embedder.decode(x)` (Gemma 4: cast to fp32 and soft-capped), and the loss then
holds the fp32 logits, their softmax's gradient and (with a softcap) the capped copy: 3 × B·L·262,144·4 bytes,
2.4 GB per chip at 3072 tokens on a v5p-8 at tp 4. Here the model runs with its head switched off (`final_hidden`:
the embedder's decode returns the normed hidden states it is given, the softcap is skipped) and `token_losses`
takes the hidden states: per chunk of CHUNK positions it computes the logits exactly as tunix does (same dtype
casts, same softcap), their logsumexp and the target's logit, and the hidden states' gradient
(softmax − one-hot, through the softcap, times the embedding) — a custom VJP, so the backward pass only scales
that gradient by each token's weight and never rebuilds the logits. Peak: one chunk's logits instead of three
copies of all of them. The chunks are independent, so XLA's scheduler would start several before finishing one (the
E2B's step held 4 fp32 + 3 bf16 chunk buffers, the 31B's all 8 bf16 chunks): an optimization barrier ties each
chunk's input to the outputs of the chunk before, and the loss holds 2 fp32 + 1 bf16 chunk buffers. Both of the
barrier's outputs are used (the chunk before's results are taken from it): with the second one unused, XLA's SPMD
partitioner dropped the link on a pod (the E4B's 6 layers on v6e-4 kept 6 fp32 chunk buffers, 4.73 GB against 4.21).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator

import jax
import jax.numpy as jnp

CHUNK = 512  # sequence positions per chunk: [rows, 512, vocab] fp32 at a time


@dataclasses.dataclass(frozen=True)
class Head:
    """How the family's tunix model turns hidden states into logits (Embedder.decode and the final softcap)."""

    dtype: jnp.dtype | None  # both operands cast to it before the dot (Gemma 4), or None: as they are (Gemma 3)
    fp32: bool  # the logits cast to fp32 before the softcap (Gemma 4); else the loss casts them (Gemma 3)
    softcap: float | None


def head_of(model) -> Head:
    config = model.config
    gemma4 = hasattr(config, "final_logit_softcap")
    return Head(jnp.dtype(config.dtype) if gemma4 else None, gemma4, getattr(config, "final_logit_softcap", None))


@contextlib.contextmanager
def final_hidden(model) -> Iterator[None]:
    """While active, `model(...)` returns the final normed hidden states [B, L, D] (as fp32 on Gemma 4) instead of
    the logits: its embedder's decode passes its input through and the final softcap is off."""
    embedder, config = model.embedder, model.config
    embedder.decode = lambda x: x  # an instance attribute: shadows the class's decode for this trace only
    if getattr(config, "final_logit_softcap", None) is not None:
        model.config = dataclasses.replace(config, final_logit_softcap=None)
    try:
        yield
    finally:
        del embedder.decode
        model.config = config


def _logits(h: jax.Array, embedding: jax.Array, head: Head) -> tuple[jax.Array, jax.Array | None]:
    """(the loss's fp32 logits of hidden states `h`, tanh of the softcap's argument or None) — tunix's decode."""
    if head.dtype is not None:
        h, embedding = h.astype(head.dtype), embedding.astype(head.dtype)
    z = jnp.dot(h, embedding.T).astype(jnp.float32)
    if head.softcap is None:
        return z, None
    t = jnp.tanh(z / head.softcap)
    return t * head.softcap, t


def _chunk_forward(h, embedding, targets, head: Head):
    """Per-token CE of one chunk and d(CE)/d(h) (h's dtype)."""
    y, t = _logits(h, embedding, head)
    lse = jax.nn.logsumexp(y, axis=-1)
    picked = jnp.take_along_axis(y, targets[..., None], axis=-1)[..., 0]
    dy = jnp.exp(y - lse[..., None]) - jax.nn.one_hot(targets, y.shape[-1], dtype=y.dtype)
    dz = dy if t is None else dy * (1 - t * t)  # d(cap·tanh(z/cap))/dz
    w = embedding if head.dtype is None else embedding.astype(head.dtype)
    dh = jnp.dot(dz.astype(w.dtype), w).astype(h.dtype)
    return lse - picked, dh


def _chunks(length: int, chunk: int) -> list[slice]:
    return [slice(s, min(s + chunk, length)) for s in range(0, length, chunk)]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _ce(hidden, embedding, targets, head: Head, chunk: int) -> jax.Array:
    return _ce_fwd(hidden, embedding, targets, head, chunk)[0]


def _ce_fwd(hidden, embedding, targets, head: Head, chunk: int):
    pieces = []
    for s in _chunks(hidden.shape[1], chunk):
        h = hidden[:, s]
        if pieces:  # the chunk's input waits for the chunk before's outputs: one chunk's logits live at a time
            h, pieces[-1] = jax.lax.optimization_barrier((h, pieces[-1]))  # both outputs used: see the docstring
        pieces.append(_chunk_forward(h, embedding, targets[:, s], head))
    losses = jnp.concatenate([p[0] for p in pieces], axis=1)
    grads = jnp.concatenate([p[1] for p in pieces], axis=1)
    return losses, (grads, embedding)


def _ce_bwd(head: Head, chunk: int, residuals, g):
    del head, chunk
    grads, embedding = residuals
    # the embedding is frozen (token_losses stops its gradient: these zeros are never computed); targets are ints
    return g[..., None].astype(grads.dtype) * grads, jnp.zeros_like(embedding), None


_ce.defvjp(_ce_fwd, _ce_bwd)


def token_losses(model, hidden: jax.Array, input_tokens: jax.Array, input_mask: jax.Array, chunk: int = CHUNK):
    """Next-token CE of every target position from the final hidden states, 0 where input_mask says the token is not
    trained: [B, L-1] — the same numbers as the loss on tunix's full logits (tests/train/jax/test_logits.py)."""
    head = head_of(model)
    embedding = jax.lax.stop_gradient(model.embedder.input_embedding.value)
    losses = _ce(hidden[:, :-1], embedding, input_tokens[:, 1:], head, chunk)
    return losses * input_mask[:, 1:]
