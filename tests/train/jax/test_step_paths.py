"""The jax step's faster paths compute the step it replaces, on packed rows (tunix Gemma 4 with the 31B's head sizes:
head_dim 256 sliding and 512 k_eq_v global layers, 2 KV heads → 1 on globals, softcap; a tp=2 mesh):

- splash attention with segment ids (Pallas interpret mode on this CPU) = tunix's dense masked attention;
- the chunked LM head + CE (crosstune.train.jax.logits) = CE on tunix's full logits;
- the matmul-saving remat ("dots"), full remat = no remat; "dots_and_attention" (splash's residuals kept too) with
  splash = dense attention without remat;

loss and every LoRA gradient. Tolerances from the fp32 arithmetic: the paths add the same terms in another order
(attention in 128-blocks with an online softmax, the head in chunks), so each value differs by a few ulps of its
accumulations: relative 1e-5 on the loss (a sum of ~400 token CEs of ~6.5 each, each a logsumexp over 512 logits:
~1e3 fp32 roundings of 6e-8) and 2e-4 on gradients relative to the largest entry of each tensor (gradients sum over
every token and pass 2 layers' backward: measured 5e-6 for splash's own q/k/v gradients on these shapes)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("tunix")
# ~2 min on an idle 2-core box (splash runs in Pallas interpret mode; 8 min under load): the chunked loss alone has a
# fast default test (test_logits.py)
pytestmark = pytest.mark.slow

LOSS_RTOL = 1e-5
GRAD_RTOL = 2e-4
LENGTH = 256  # two 128-blocks per row: splash skips blocks (causal, and the 128-token window)


def _spec(kv_shared: bool = False):
    """The 31B's head sizes in 2 layers; `kv_shared`: the E models' layout instead (no k_eq_v, 4 layers of which
    the last 2 take the K/V of the first 2, as tunix and transformers share them)."""
    from crosstune.families.gemma4.family import make_spec

    if kv_shared:
        spec = make_spec(
            "gemma-4-splash-e-test", 4, 64, 128, 4, 2, 256, 2, 512, 128, 512, k_eq_v=False, every=2, kv_shared=2
        )
        return dataclasses.replace(spec, layer_types=("sliding", "global", "sliding", "global"))
    spec = make_spec("gemma-4-splash-test", 6, 64, 128, 4, 2, 256, 1, 512, 128, 512)
    return dataclasses.replace(spec, layer_types=("sliding", "global"))


def _inputs():
    """Two packed rows: three documents and padding, one document over the whole row."""
    rng = np.random.default_rng(0)
    segments = np.zeros((2, LENGTH), np.int32)
    segments[0, :90], segments[0, 90:200], segments[0, 200:230] = 1, 2, 3
    segments[1, :] = 1
    positions = np.zeros_like(segments)
    for r in range(2):
        for s in np.unique(segments[r][segments[r] > 0]):
            idx = np.flatnonzero(segments[r] == s)
            positions[r, idx] = np.arange(len(idx))
    mask = (segments > 0) & (rng.random(segments.shape) < 0.7)
    return {
        "input_tokens": rng.integers(0, 512, segments.shape).astype(np.int32),
        "input_mask": mask,
        "positions": positions,
        "segment_ids": segments,
        "loss_weight": np.full((2,), 1 / max(1, int(mask[:, 1:].sum())), np.float32),
    }


def _model(mesh, *, attention="dense", remat=None, state=None, kv_shared=False):
    """The tunix model with Qwix LoRA (r=4 on all targets), random base and LoRA (B ≠ 0) from seed 0."""
    import jax
    from flax import nnx

    from crosstune.families import get_family
    from crosstune.recipe.schema import LoraSection
    from crosstune.train.jax.model import abstract_model

    cfg = get_family("gemma4").hf_config(_spec(kv_shared))
    model, _ = abstract_model(
        "gemma4", cfg, mesh, remat=remat, lora=LoraSection(rank=4, alpha=8.0), attention=attention, platform="cpu"
    )
    graphdef, abstract = nnx.split(model)
    if state is None:
        leaves, tree = jax.tree.flatten(abstract)
        keys = jax.random.split(jax.random.PRNGKey(0), len(leaves))
        state = jax.tree.unflatten(
            tree, [0.05 * jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves, strict=True)]
        )
    return nnx.merge(graphdef, state), state


def _loss_and_grads(model, inputs, mesh):
    import jax
    from flax import nnx

    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import mesh_context

    with mesh_context(mesh):
        fn = nnx.jit(nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.LoRAParam)))
        loss, grads = fn(model, **{k: jax.numpy.asarray(v) for k, v in inputs.items()})
    return float(loss), {jax.tree_util.keystr(p): np.asarray(g) for p, g in jax.tree_util.tree_leaves_with_path(grads)}


def _reference(model, inputs, mesh):
    """Loss and LoRA grads through tunix's full logits and the dense mask (the step before these paths)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from crosstune.train.jax.loss import attention_mask, token_losses
    from crosstune.train.jax.model import mesh_context

    def loss(model, input_tokens, input_mask, positions, segment_ids, loss_weight):
        logits, _ = model(input_tokens, positions, None, attention_mask(segment_ids))
        return jnp.sum(token_losses(logits, input_tokens, input_mask) * loss_weight[:, None])

    with mesh_context(mesh):
        fn = nnx.jit(nnx.value_and_grad(loss, argnums=nnx.DiffState(0, nnx.LoRAParam)))
        value, grads = fn(model, **{k: jnp.asarray(v) for k, v in inputs.items()})
    return float(value), {jax.tree_util.keystr(p): np.asarray(g) for p, g in jax.tree_util.tree_leaves_with_path(grads)}


def _assert_same(got, want, modules=24):
    loss, grads = got
    ref_loss, ref_grads = want
    assert loss == pytest.approx(ref_loss, rel=LOSS_RTOL)
    assert grads.keys() == ref_grads.keys() and len(grads) == modules  # 2 layers × 6 modules (fused k/v or k=v) × A, B
    worst = max(np.abs(grads[k] - ref_grads[k]).max() / np.abs(ref_grads[k]).max() for k in grads)
    assert worst <= GRAD_RTOL, worst
    return worst


@pytest.fixture(scope="module")
def setup():
    from crosstune.train.jax.model import make_mesh

    mesh = make_mesh(1, 2)
    model, state = _model(mesh)
    inputs = _inputs()
    return mesh, state, inputs, _reference(model, inputs, mesh)


def test_chunked_head_equals_the_full_logits(setup):
    from crosstune.train.jax import logits

    mesh, state, inputs, reference = setup
    model, _ = _model(mesh, state=state)
    chunk = logits.CHUNK
    logits.CHUNK = 100  # three chunks over 255 targets, the last one short
    try:
        _assert_same(_loss_and_grads(model, inputs, mesh), reference)
    finally:
        logits.CHUNK = chunk


@pytest.mark.parametrize("remat", ["full", "dots"])
def test_recompute_modes_equal_no_recompute(setup, remat):
    mesh, state, inputs, reference = setup
    model, _ = _model(mesh, remat=remat, state=state)
    _assert_same(_loss_and_grads(model, inputs, mesh), reference)


def test_keeping_splash_s_residuals_equals_no_recompute(setup):
    """recompute dots_and_attention: the backward reads the splash output and logsumexp the forward saved."""
    mesh, state, inputs, reference = setup
    model, _ = _model(mesh, attention="splash", remat="dots_and_attention", state=state)
    _assert_same(_loss_and_grads(model, inputs, mesh), reference)


def test_splash_with_segment_ids_equals_dense_masked_attention(setup):
    """Both layer types (head_dim 256 sliding with its 128-token window, 512 k_eq_v global with one KV head kept
    whole over tp), packed rows with padding: the loss and every LoRA gradient."""
    from crosstune.train.jax.attention import Gemma4SplashAttention

    mesh, state, inputs, reference = setup
    model, _ = _model(mesh, attention="splash", state=state)
    assert all(isinstance(layer.attn, Gemma4SplashAttention) for layer in model.layers)
    worst = _assert_same(_loss_and_grads(model, inputs, mesh), reference)
    print(f"splash vs dense: worst LoRA gradient difference {worst:.2e} of the tensor's largest entry")


def test_splash_on_kv_shared_layers_equals_dense_masked_attention():
    """The E models' KV-shared layers take their owner's normed, roped keys and values in the splash path too.
    Before, they fell back to tunix's dense path, which can't read splash's segment-id mask: no E-model step with
    splash compiled (XLA's shallow screens of the E4B failed on a broadcast). Loss and every LoRA gradient equal
    to tunix's dense masked attention; the shared layers carry no k/v LoRA (they have no K/V of their own)."""
    from crosstune.families import get_family
    from crosstune.train.jax.model import make_mesh

    spec, fam, mesh, inputs = _spec(kv_shared=True), get_family("gemma4"), make_mesh(1, 2), _inputs()
    targets = ("q", "k", "v", "o", "gate", "up", "down")
    modules = 2 * sum(len(fam.tunix_lora_modules(spec, layer, targets)) for layer in range(spec.num_layers))
    assert modules == 2 * (6 + 6 + 5 + 5)  # kv_einsum only where the layer computes K/V
    dense, state = _model(mesh, kv_shared=True)
    splash, _ = _model(mesh, attention="splash", state=state, kv_shared=True)
    _assert_same(_loss_and_grads(splash, inputs, mesh), _reference(dense, inputs, mesh), modules=modules)
