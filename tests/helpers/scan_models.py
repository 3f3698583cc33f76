"""Tiny tunix models with crosstune's Qwix LoRA, stacked or not (crosstune.train.jax.layer_scan), and the step they
compute, for the scan's tests (tests/train/jax/test_layer_scan.py, test_scan_recompute.py).

Tolerances from the fp32 arithmetic: the scanned and unrolled programs run the same ops on the same values, but XLA
fuses a while body apart from its neighbours, so a reduction may be summed in another order: a few fp32 ulps per
value. The loss (a sum of ~60 token CEs) to 1e-6 relative; each LoRA gradient (summed over tokens and back through
up to 7 layers) to 1e-5 of its tensor's largest entry (measured ≤ 2e-6)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

LOSS_RTOL = 1e-6
GRAD_RTOL = 1e-5
LENGTH = 32
PAIR = ("sliding", "global")


def gemma4_config(layers: int, *, kv_shared: int = 0, moe: bool = False, double_wide: bool = True) -> dict:
    """A tiny Gemma 4 (31B layout: k_eq_v global layers, softcap) whose attention pattern repeats every 2 layers;
    with `kv_shared`, the E sizes' layout: the last `kv_shared` layers reuse earlier layers' K/V and have MLPs twice
    as wide (E2B's; as wide as the others without `double_wide`: E4B's), and every layer takes a per-layer input;
    with `moe`, the 26B-A4B's: 8 experts of width 32, 2 per token, beside the dense MLP."""
    from crosstune.families import get_family
    from crosstune.families.gemma4.family import make_spec
    from crosstune.families.spec import MoE

    e = dict(kv_shared=kv_shared, per_layer_input=16, double_wide=double_wide) if kv_shared else {}
    e |= dict(moe=MoE(num_experts=8, top_k=2, expert_dim=32)) if moe else {}
    spec = make_spec("gemma-4-scan-test", layers, 64, 128, 4, 2, 32, 1, 64, 16, 128, every=2, **e)
    types = (PAIR * layers)[:layers]
    return get_family("gemma4").hf_config(dataclasses.replace(spec, layer_types=types))


def gemma3_config(layers: int) -> dict:
    """A tiny Gemma 3: 5 sliding : 1 global, so 14 layers are 2 groups of 6 and 2 layers after them."""
    from crosstune.families import get_family
    from crosstune.families.gemma3.family import make_spec

    return get_family("gemma3").hf_config(make_spec("gemma-3-scan-test", layers, 64, 128, 4, 2, 32, 16, 128, 32.0))


def tiny_model(
    mesh,
    layers: int,
    *,
    scan: bool,
    remat=None,
    dropout: float = 0.25,
    family: str = "gemma4",
    kv_shared: int = 0,
    moe: bool = False,
    double_wide: bool = True,
):
    """The tunix model with crosstune's Qwix LoRA (r=4, all targets, dropout), random base and LoRA from seed 0,
    its layers stacked last when `scan` (as the run's worker does)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from crosstune.recipe.schema import LoraSection
    from crosstune.train.jax.layer_scan import stack_layers
    from crosstune.train.jax.model import abstract_model, mesh_context

    lora = LoraSection(rank=4, alpha=8.0, dropout=dropout)
    config = (
        gemma4_config(layers, kv_shared=kv_shared, moe=moe, double_wide=double_wide)
        if family == "gemma4"
        else gemma3_config(layers)
    )
    model, _ = abstract_model(family, config, mesh, remat=remat, lora=lora, platform="cpu")
    graphdef, abstract = nnx.split(model)
    leaves, tree = jax.tree.flatten(abstract)
    rng = np.random.default_rng(0)  # numpy's draws: a jax.random draw per shape would compile ~75 programs (~8 s)
    values = [
        jnp.asarray(0.05 * rng.standard_normal(x.shape), x.dtype)
        if jnp.issubdtype(x.dtype, jnp.floating)
        else jnp.zeros(x.shape, x.dtype)
        for x in leaves
    ]
    model = nnx.merge(graphdef, jax.tree.unflatten(tree, values))
    if dropout:
        model.set_attributes(qwix_rngs=nnx.Rngs(dropout=3))  # as crosstune.train.jax.model.build_model does
    if scan:
        with mesh_context(mesh):
            stack_layers(model, mesh)
    return model


def step_inputs(length: int = LENGTH) -> dict:
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    segments = np.ones((2, length), np.int32)
    segments[0, 20:] = 2
    return {
        "input_tokens": jnp.asarray(rng.integers(0, 128, segments.shape), jnp.int32),
        "input_mask": jnp.asarray(rng.random(segments.shape) < 0.9),
        "positions": jnp.asarray(np.r_[np.arange(20), np.arange(length - 20)][None].repeat(2, 0), jnp.int32),
        "segment_ids": jnp.asarray(segments),
        "loss_weight": jnp.full((2,), 1 / 60, jnp.float32),
    }


def loss_and_grads(model, mesh):
    """Loss and LoRA gradients (by tunix's per-layer names) of crosstune's loss, and the dropout RNG count after it."""
    import jax
    from flax import nnx

    from crosstune.train.jax.layer_scan import per_layer
    from crosstune.train.jax.lora import param_name
    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import mesh_context

    with mesh_context(mesh):
        fn = nnx.jit(nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.LoRAParam)))
        loss, grads = fn(model, **step_inputs())
    counts = [int(x) for x in jax.tree.leaves(nnx.state(model, nnx.RngCount))]
    named = per_layer({param_name(p): np.asarray(g) for p, g in jax.tree_util.tree_leaves_with_path(grads)})
    return float(loss), named, counts


def assert_same_step(scanned, unrolled) -> None:
    loss, grads, counts = scanned
    ref_loss, ref_grads, ref_counts = unrolled
    assert loss == pytest.approx(ref_loss, rel=LOSS_RTOL)
    assert grads.keys() == ref_grads.keys() and grads
    worst = max(np.abs(grads[k] - ref_grads[k]).max() / np.abs(ref_grads[k]).max() for k in grads)
    assert worst <= GRAD_RTOL, worst
    assert counts == ref_counts and counts[0] > 0  # one shared stream, advanced by every draw of every layer
