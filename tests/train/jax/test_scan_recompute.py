"""What a scan over layer groups (crosstune.train.jax.layer_scan) saves and recomputes, and that it computes the
unrolled step: the same loss and LoRA gradients with the LoRA dropout on (the same masks: the one dropout RNG stream
is the scan's carry, so every draw gets the key it gets unrolled) and the same RNG count after the step, under each
remat mode; a MoE layer keeps no copy of its experts, a scanned layer's recompute has no barrier against
CSE, and dots_and_attention keeps splash's residuals. Tolerances: tests/helpers/scan_models.py."""

from __future__ import annotations

import pytest

from tests.helpers.scan_models import assert_same_step, loss_and_grads, step_inputs, tiny_model

pytest.importorskip("tunix")


@pytest.mark.slow  # ~26 s each; the default suite has the E layout's (two segments, a tail, dropout):
# tests/train/jax/test_layer_scan.py
@pytest.mark.parametrize("remat", [None, "full", "dots"])
def test_stacked_layers_compute_the_unrolled_step(mesh, remat):
    """7 layers of period 2: 3 groups stacked and the 7th layer after them."""
    scanned = loss_and_grads(tiny_model(mesh, 7, scan=True, remat=remat), mesh)
    assert_same_step(scanned, loss_and_grads(tiny_model(mesh, 7, scan=False, remat=remat), mesh))
    assert len(scanned[1]) == 7 * 6 * 2  # 7 layers × 6 adapted modules × A, B, by their per-layer names


@pytest.mark.parametrize("remat", [None, pytest.param("dots", marks=pytest.mark.slow)])  # dots: ~20 s more
def test_moe_layers_scan_without_a_copy_of_their_experts(mesh, remat):
    """The 26B-A4B's layout (8 experts of width 32 beside the dense MLP), 4 layers: 2 groups of 2. The scan's
    residuals hold no copy of any layer's experts, neither tunix's transposed one ([G, E, D, 2X]) nor a slice of the
    stack ([G, E, ...]): a scanned MoE reads every group's experts whole (crosstune.train.jax.moe.WholeMoE,
    tests/train/jax/test_scan_moe.py). The same loss and gradients as unrolled, dropout on; with dots too (the
    group index the MoE reads inside the layer's remat, without the barrier against CSE in the scan)."""
    from flax import nnx
    from jax._src.ad_checkpoint import saved_residuals

    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import mesh_context

    scanned = tiny_model(mesh, 4, scan=True, moe=True, remat=remat)
    graphdef, state = nnx.split(scanned)
    with mesh_context(mesh):
        saved = saved_residuals(lambda s: loss_fn(nnx.merge(graphdef, s), **step_inputs()), state)
    looped = [a.shape for a, where in saved if where.startswith("output of scan")]
    assert looped and not [s for s in looped if len(s) > 3 and s[1] in (8, 16)], looped  # [G, E or E·G, ...]
    unrolled = tiny_model(mesh, 4, scan=False, moe=True, remat=remat)
    assert_same_step(loss_and_grads(scanned, mesh), loss_and_grads(unrolled, mesh))


@pytest.mark.slow
def test_dropout_masks_are_drawn_in_the_scan(mesh):
    """Without dropout the loss differs (so the masks above were drawn and matched, not absent): the LoRA branch
    is small next to the base at these weights (1.6e-4 of the loss), far above fp32 rounding (~1e-7)."""
    with_dropout = loss_and_grads(tiny_model(mesh, 4, scan=True), mesh)[0]
    without = loss_and_grads(tiny_model(mesh, 4, scan=True, dropout=0.0), mesh)[0]
    assert abs(with_dropout - without) > 1e-5 * abs(without)


def _remats(jaxpr) -> list[bool]:
    """prevent_cse of every jax.checkpoint in `jaxpr` and the jaxprs its equations hold (a scan's body)."""
    import jax

    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "remat2":  # jax.checkpoint's primitive
            out.append(eqn.params["prevent_cse"])
        for value in eqn.params.values():
            for inner in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(inner, jax.extend.core.ClosedJaxpr):
                    out += _remats(inner.jaxpr)
                elif isinstance(inner, jax.extend.core.Jaxpr):
                    out += _remats(inner)
    return out


def test_a_scanned_layer_s_recompute_has_no_barrier_against_cse(mesh):
    """dots in a scan: each layer's jax.checkpoint without prevent_cse's barrier (crosstune.train.jax.remat.in_scan),
    one per layer of the body; unrolled, with it, one per layer. In a scan the forward and the backward are two
    loops, so XLA can't merge a recompute into its forward, and the barrier only made it copy each layer's slice of
    the stacked weights and kept outputs (the 31B's 4 layers for one v5e chip: 46 dynamic-slice fusions, 5 without)."""
    import jax
    from flax import nnx

    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import mesh_context

    found = {}
    for scan in (True, False):
        graphdef, state = nnx.split(tiny_model(mesh, 4, scan=scan, remat="dots"))
        with mesh_context(mesh):
            jaxpr = jax.make_jaxpr(lambda s, g=graphdef: loss_fn(nnx.merge(g, s), **step_inputs()))(state)
        found[scan] = _remats(jaxpr.jaxpr)
    assert found == {True: [False, False], False: [True] * 4}  # a body of 2 layers (period 2); 4 layers unrolled


def test_dots_and_attention_keeps_the_splash_kernel_s_residuals(mesh):
    """recompute dots_and_attention (what a scan's body needs to hold what XLA holds unrolled): each layer's
    backward reads splash's output [B, N, T, H] and logsumexp [B, N, T], saved by the name the kernel gives them,
    where dots saves neither (the backward runs the kernel's forward again); both save the weight matmuls'."""
    from flax import nnx
    from jax._src.ad_checkpoint import saved_residuals  # jax.ad_checkpoint exports only the printing form

    from crosstune.train.jax.attention import use_splash
    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import mesh_context

    kept = {}
    for mode in ("dots", "dots_and_attention"):
        model = tiny_model(mesh, 2, scan=False, remat=mode, dropout=0.0)
        assert use_splash(model, interpret=True, block=128) == 2
        graphdef, state = nnx.split(model)
        with mesh_context(mesh):
            saved = saved_residuals(lambda s, g=graphdef: loss_fn(nnx.merge(g, s), **step_inputs(128)), state)
        kept[mode] = sorted(a.shape for a, where in saved if "train/jax/attention.py" in where)
        kept[mode, "dots"] = sum(where.startswith("output of dot_general") for _, where in saved)
    assert kept["dots"] == []
    assert kept["dots_and_attention"] == [(2, 4, 128), (2, 4, 128), (2, 4, 128, 32), (2, 4, 128, 64)]  # both layers
    assert kept["dots", "dots"] == kept["dots_and_attention", "dots"] > 0
