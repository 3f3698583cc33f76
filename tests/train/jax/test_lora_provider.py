"""crosstune's Qwix LoRA provider (crosstune.train.jax.lora_provider) against Qwix's own on the same parameters: the
same numbers in fp32, the LoRA branch in bf16 when the activations are bf16 (no fp32 promotion), and a dropout mask
drawn by RngBitGenerator that drops what nnx.Dropout's rate says."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

D, F, R = 16, 24, 4


def _model_and_input(dtype):
    from flax import nnx

    class Block(nnx.Module):  # an einsum (Qwix's einsum path) and a Linear (its dot_general path)
        def __init__(self, rngs):
            self.w = nnx.Param(jax.random.normal(jax.random.key(1), (D, F), dtype) * 0.3)
            self.out = nnx.Linear(F, D, param_dtype=dtype, dtype=dtype, rngs=rngs)

        def __call__(self, x):
            return self.out(jnp.einsum("btd,df->btf", x, self.w.value))

    x = jax.random.normal(jax.random.key(2), (2, 8, D), dtype)
    return Block(nnx.Rngs(0)), x


def _lora(model, x, provider_cls, dropout=0.0):
    import qwix
    from flax import nnx

    rule = qwix.LoraRule(module_path=".*", rank=R, alpha=2.0 * R, dropout=dropout)
    lora = qwix.apply_lora_to_model(model, provider_cls([rule]), x, rngs=nnx.Rngs(params=3, dropout=4))
    params = [node for _, node in nnx.iter_graph(lora) if isinstance(node, nnx.LoRAParam)]
    for i, node in enumerate(params):  # fp32 LoRA weights, as crosstune keeps them; B non-zero
        node.value = jax.random.normal(jax.random.key(10 + i), node.value.shape, jnp.float32) * 0.5
    if dropout:
        lora.set_attributes(qwix_rngs=nnx.Rngs(dropout=4))  # as crosstune.train.jax.model.build_model does
    return lora


def test_same_numbers_as_qwix_in_fp32():
    import qwix

    from crosstune.train.jax.lora_provider import LoraProvider

    model, x = _model_and_input(jnp.float32)
    ours, theirs = _lora(model, x, LoraProvider), _lora(_model_and_input(jnp.float32)[0], x, qwix.LoraProvider)
    a, b = np.asarray(ours(x)), np.asarray(theirs(x))
    assert a.dtype == np.float32 and np.abs(a - np.asarray(model(x))).max() > 0.1  # the LoRA changes the output
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)  # the same ops in the same dtype: fp32 rounding only


def test_the_lora_branch_runs_in_bf16_where_qwix_promotes_to_fp32():
    """A bf16 activation times Qwix's fp32 LoRA weights gives an fp32 output; ours stays bf16 and agrees within bf16
    rounding of the branch (|Δ| ≤ a few bf16 ulps of the output's scale: 2^-8 relative per rounding, 3 roundings)."""
    import qwix

    from crosstune.train.jax.lora_provider import LoraProvider

    model, x = _model_and_input(jnp.bfloat16)
    ours = _lora(model, x, LoraProvider)
    theirs = _lora(_model_and_input(jnp.bfloat16)[0], x, qwix.LoraProvider)
    a, b = ours(x), theirs(x)
    assert a.dtype == jnp.bfloat16 and b.dtype == jnp.float32
    scale = float(jnp.max(jnp.abs(b)))
    assert float(jnp.max(jnp.abs(a.astype(jnp.float32) - b))) <= 4 * 3 * 2.0**-8 * scale
    from flax import nnx

    graph, state = nnx.split(ours)
    traced = jax.make_jaxpr(lambda s, x: nnx.merge(graph, s)(x))(state, x)
    dots = [e for e in traced.eqns if e.primitive.name == "dot_general"]
    assert dots and all(e.outvars[0].aval.dtype == jnp.bfloat16 for e in dots)  # no fp32 matmul anywhere


def _assert_zero_or(y: np.ndarray, scale: float) -> None:
    """Every element of dropout(ones) is 0 or one survivor value within an fp32 ulp of `scale` (1 / keep): XLA
    computes x / keep in fp32 on whatever CPU runs it, so the last bit is not asserted."""
    values = np.unique(y)
    assert len(values) == 2 and values[0] == 0.0
    assert abs(float(values[1]) - scale) <= float(np.spacing(np.float32(scale)))


def test_dropout_drops_at_its_rate_and_scales_the_rest():
    from crosstune.train.jax.lora_provider import dropout

    x = jnp.ones((512, 1024), jnp.float32)
    y = np.asarray(dropout(x, 0.25, jax.random.key(7)))
    dropped = float(np.mean(y == 0))
    n = x.size  # binomial: the dropped fraction within 6 standard deviations of 0.25
    assert abs(dropped - 0.25) < 6 * np.sqrt(0.25 * 0.75 / n)
    _assert_zero_or(y, 1 / 0.75)
    same = np.asarray(dropout(x, 0.25, jax.random.key(7)))
    other = np.asarray(dropout(x, 0.25, jax.random.key(8)))
    assert (same == y).all() and (other != y).any()


def test_dropout_keeps_a_one_byte_mask_not_its_draws():
    """16-bit draws, compared once; the boolean mask goes through an optimization barrier, so XLA keeps the mask for
    the backward instead of the draws (a pod kept u32 draws per layer: docs/BENCHMARKS.md). The kept probability is
    the threshold's, and the survivors are scaled by its inverse: the expectation is the input's."""
    from crosstune.train.jax.lora_provider import DRAW_VALUES, dropout

    x = jnp.ones((64, 128), jnp.float32)
    jaxpr = jax.make_jaxpr(lambda x: dropout(x, 0.05, jax.random.key(3)))(x).jaxpr
    barriers = [e for e in jaxpr.eqns if e.primitive.name == "optimization_barrier"]
    assert [v.aval.dtype for e in barriers for v in e.invars] == [jnp.bool_]
    draws = [e for e in jaxpr.eqns if e.primitive.name.startswith("random_bits")]
    assert [e.outvars[0].aval.dtype for e in draws] == [jnp.uint16]
    y = np.asarray(dropout(x, 0.05, jax.random.key(3)))
    _assert_zero_or(y, DRAW_VALUES / 62259)  # round(0.95 · 2^16) = 62259


@pytest.mark.parametrize("rate", [0.05, 0.5])
def test_dropout_through_the_provider_uses_the_module_s_stream(rate):
    """Two calls advance the module's qwix_rngs stream: two different masks; a model rebuilt from the same seed
    draws the same masks again (a run is as reproducible as with nnx.Dropout)."""
    from crosstune.train.jax.lora_provider import LoraProvider

    model, x = _model_and_input(jnp.float32)
    first = _lora(model, x, LoraProvider, dropout=rate)
    y1, y2 = np.asarray(first(x)), np.asarray(first(x))
    again = _lora(_model_and_input(jnp.float32)[0], x, LoraProvider, dropout=rate)
    z1 = np.asarray(again(x))
    assert not np.array_equal(y1, y2) and np.array_equal(y1, z1)
