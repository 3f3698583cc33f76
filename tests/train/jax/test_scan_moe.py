"""A scan's MoE layers hold their experts whole (crosstune.train.jax.moe.WholeMoE): every group's experts one
loop-invariant operand of the scan ([E·G, ...], E-major), each layer's ragged dots reading its own through group
sizes zero but at its experts, and the step is the unrolled one: the same loss and LoRA gradients (dropout on), on a
mesh that shards the experts over fsdp=2 as it shards one layer's (there each layer slices its own experts out:
crosstune.train.jax.moe.WholeMoE). Tolerances: tests/helpers/scan_models.py."""

from __future__ import annotations

import pytest

from tests.helpers.scan_models import LOSS_RTOL, assert_same_step, loss_and_grads, step_inputs, tiny_model

pytest.importorskip("tunix")

GROUPS, EXPERTS, HIDDEN, WIDTH = 3, 8, 64, 32  # 6 layers of period 2; the tiny 26B-A4B layout


@pytest.fixture(scope="module", params=[2, pytest.param(1, marks=pytest.mark.slow)], ids=["fsdp2", "fsdp1"])
def fsdp_mesh(request):
    """fsdp=2 × tp=1 (XLA_FLAGS=--xla_force_host_platform_device_count=8): the experts split along E, each layer
    slices its own out of the stack (WholeMoE.sliced_experts); fsdp=1: every layer reads the stack whole, its group
    sizes padded (tests/train/jax/test_scan_recompute.py has this path by default, 2 groups)."""
    import jax

    from crosstune.train.jax.model import make_mesh

    if len(jax.devices()) < request.param:
        pytest.skip(f"needs {request.param} devices: XLA_FLAGS=--xla_force_host_platform_device_count=8")
    return make_mesh(request.param, 1)


def _scan_operands(model, mesh) -> list:
    """The shapes of the scan's loop-invariant operands and of its xs, and the scan's saved residuals' shapes."""
    import jax
    from flax import nnx
    from jax._src.ad_checkpoint import saved_residuals

    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.model import mesh_context

    graphdef, state = nnx.split(model)
    with mesh_context(mesh):
        jaxpr = jax.make_jaxpr(lambda s: loss_fn(nnx.merge(graphdef, s), **step_inputs()))(state)
        saved = saved_residuals(lambda s: loss_fn(nnx.merge(graphdef, s), **step_inputs()), state)
    (scan,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
    consts = [v.aval.shape for v in scan.invars[: scan.params["num_consts"]]]
    xs = [v.aval.shape for v in scan.invars[scan.params["num_consts"] + scan.params["num_carry"] :]]
    looped = [a.shape for a, where in saved if where.startswith("output of scan")]
    return consts, xs, looped


def test_moe_layers_scan_their_experts_whole(fsdp_mesh):
    """6 layers, 3 groups of 2: each group position's experts in four layouts, whole and sharded along E over fsdp;
    the scan neither slices them (not in its xs) nor saves any copy; the same step as unrolled."""
    from crosstune.planner.memory import scan_slices_experts
    from crosstune.train.jax.moe import WholeMoE

    scanned = tiny_model(fsdp_mesh, 2 * GROUPS, scan=True, moe=True)
    moes = [m for _, m in scanned.iter_modules() if isinstance(m, WholeMoE)]
    assert len(moes) == 2 and all(m.stacked_groups == GROUPS for m in moes)
    # the planner's rule for which way a scan takes (its time and memory terms) is the step's own
    assert all(m.sliced_experts == scan_slices_experts(fsdp_mesh.shape["fsdp"]) for m in moes)
    gate = moes[0].gate_forward.get_value()
    assert gate.shape == (EXPERTS * GROUPS, HIDDEN, 2 * WIDTH)
    fsdp = fsdp_mesh.shape["fsdp"]
    assert gate.sharding.shard_shape(gate.shape)[0] == EXPERTS * GROUPS // fsdp  # E-major rows: experts per device
    consts, xs, looped = _scan_operands(scanned, fsdp_mesh)
    whole = {(EXPERTS * GROUPS, HIDDEN, 2 * WIDTH), (EXPERTS * GROUPS, 2 * WIDTH, HIDDEN)}
    whole |= {(EXPERTS * GROUPS, WIDTH, HIDDEN), (EXPERTS * GROUPS, HIDDEN, WIDTH)}
    assert whole <= set(consts), consts
    assert not [s for s in xs + looped if len(s) > 3 and s[1] in (EXPERTS, EXPERTS * GROUPS)], (xs, looped)
    unrolled = tiny_model(fsdp_mesh, 2 * GROUPS, scan=False, moe=True)
    assert_same_step(loss_and_grads(scanned, fsdp_mesh), loss_and_grads(unrolled, fsdp_mesh))


@pytest.mark.slow  # ~30 s: the check that the offsets above are what made the steps agree
def test_a_wrong_offset_reads_another_layer_s_experts(fsdp_mesh, monkeypatch):
    """Group g + 1's experts in group g's layers: the step is not the unrolled one, its loss 60 times the tolerance
    away (so the test above checks the offsets, padded or sliced)."""
    from crosstune.train.jax import moe

    right = loss_and_grads(tiny_model(fsdp_mesh, 2 * GROUPS, scan=True, moe=True), fsdp_mesh)
    monkeypatch.setattr(moe, "_group", lambda groups: (moe.GROUP.get() + 1) % groups)
    wrong = loss_and_grads(tiny_model(fsdp_mesh, 2 * GROUPS, scan=True, moe=True), fsdp_mesh)
    with pytest.raises(AssertionError):
        assert_same_step(wrong, right)
    assert abs(wrong[0] - right[0]) > 10 * LOSS_RTOL * abs(right[0]), (wrong[0], right[0])  # measured: 6e-5
