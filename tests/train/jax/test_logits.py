"""The chunked LM head + CE (crosstune.train.jax.logits) against CE on the full logits, on random hidden states and a
random embedding (no model: fast): per-token losses and the hidden states' gradient, with Gemma 4's softcap and cast
to bf16 operands, and without (Gemma 3). fp32 throughout on this CPU: the chunked path computes each logit with the
same dot as the full one and reduces the same terms; the tolerance covers a reordered logsumexp over 300 logits and
a 40-wide dot (relative 1e-5: ~100 roundings of 6e-8)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("jax")

RTOL = 1e-5


def _model(softcap):
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    embedding = SimpleNamespace(value=jnp.asarray(rng.normal(0, 0.5, (300, 40)), jnp.float32))
    config = (
        SimpleNamespace(dtype=jnp.float32)
        if softcap is None
        else SimpleNamespace(dtype=jnp.float32, final_logit_softcap=softcap)
    )
    return SimpleNamespace(config=config, embedder=SimpleNamespace(input_embedding=embedding))


@pytest.mark.parametrize("softcap", [30.0, None], ids=["gemma4-softcap", "gemma3"])
def test_chunked_losses_and_gradient_equal_the_full_logits(softcap):
    import jax
    import jax.numpy as jnp

    from crosstune.train.jax.logits import token_losses
    from crosstune.train.jax.loss import token_losses as full_losses

    model = _model(softcap)
    rng = np.random.default_rng(1)
    hidden = jnp.asarray(rng.normal(0, 1, (2, 70, 40)), jnp.float32)
    tokens = jnp.asarray(rng.integers(0, 300, (2, 70)), jnp.int32)
    mask = jnp.asarray(rng.random((2, 70)) < 0.6)
    weight = jnp.asarray(rng.random((2, 70 - 1)), jnp.float32)

    def full(h):
        z = jnp.dot(h, model.embedder.input_embedding.value.T).astype(jnp.float32)
        if softcap:
            z = jnp.tanh(z / softcap) * softcap
        return full_losses(z, tokens, mask)

    def chunked(h):
        return token_losses(model, h, tokens, mask, chunk=16)  # 5 chunks over 69 targets, the last one short

    got, want = chunked(hidden), full(hidden)
    assert got.shape == want.shape == (2, 69)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * float(jnp.abs(want).max()))
    g_got = jax.grad(lambda h: jnp.sum(chunked(h) * weight))(hidden)
    g_want = jax.grad(lambda h: jnp.sum(full(h) * weight))(hidden)
    assert float(jnp.abs(g_got - g_want).max()) <= RTOL * float(jnp.abs(g_want).max())
    assert float(jnp.abs(g_want).max()) > 0 and float(jnp.abs(g_got[:, -1]).max()) == 0  # no target after the last


def test_each_chunk_waits_for_the_one_before():
    """XLA:TPU's scheduler started several independent chunks at once (E2B's step held 4 fp32 + 3 bf16 chunk
    buffers); each chunk after the first takes its input through an optimization barrier with the outputs of the
    chunk before, so one chunk's logits are live at a time on a chip (XLA:CPU holds them all either way: this
    checks the chain)."""
    import jax
    import jax.numpy as jnp

    from crosstune.train.jax.logits import token_losses

    model = _model(30.0)
    hidden = jnp.zeros((1, 70, 40), jnp.float32)
    tokens, mask = jnp.zeros((1, 70), jnp.int32), jnp.ones((1, 70), bool)
    jaxpr = jax.make_jaxpr(lambda h: token_losses(model, h, tokens, mask, chunk=16))(hidden)
    eqns = list(_equations(jaxpr.jaxpr))
    barriers = [e for e in eqns if e.primitive.name == "optimization_barrier"]
    assert len(barriers) == 4  # 5 chunks over 69 targets: 4 links
    # the losses and gradients are concatenated from the barriers' outputs, not from the values that went in: with
    # the second output unused, XLA's SPMD partitioner dropped the link on a pod (6 fp32 chunk buffers on v6e-4)
    linked = {id(v) for e in barriers for v in e.outvars}
    joins = [[id(v) in linked for v in e.invars] for e in eqns if e.primitive.name == "concatenate"]
    assert joins == [[True] * 4 + [False]] * 2  # the last chunk has no chunk after it


def _equations(jaxpr):
    """Every equation of `jaxpr` and of the jaxprs nested in it (the custom VJP's, pjit's)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for inner in value if isinstance(value, list | tuple) else [value]:
                inner = getattr(inner, "jaxpr", None)
                if inner is not None:
                    yield from _equations(inner if hasattr(inner, "eqns") else inner.jaxpr)
