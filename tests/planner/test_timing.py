"""The planner's step time (crosstune.planner.timing) against what the TPU v5e chip measured (`plan --run`,
docs/BENCHMARKS.md "TPU v5e chip, measured"): within ±10 % on every measured shape; its splash count is the
kernel's own; a chip never measured borrows the v5e's fractions and says so."""

from __future__ import annotations

import pytest

from crosstune.planner import plan_recipe
from crosstune.planner.aot_report import with_layers
from crosstune.planner.estimate import SCANNED_MEMORY_NOTE
from crosstune.planner.planned_recipe import load_for_plan
from crosstune.planner.timing import CALIBRATED_WITHIN, SPLASH_MATMULS, predict_step, visited_blocks
from tests.helpers.paths import RECIPES

ONE_CHIP = ["hardware=tpu-v5e-1", "backend.jax.mesh.fsdp=1", "backend.jax.mesh.tp=1", "serve.tensor_parallel_size=1"]
# (recipe, --set, layers) -> (s per micro-step, peak GB) measured on the chip (docs/BENCHMARKS.md, "The planner against
# the chip"); each peak is a process's own (memory_stats counts from the process's start). The rows with a peak ran
# the step as it is now (2026-12-06, 24c2a4b: the loss's chunks one at a time, 16-bit dropout draws whose 1-byte mask
# XLA keeps); None: measured before that (the 12B's 6 layers then held its u32 draws: 8.41 GB against 6.75 now) or
# after a larger shape in the same process. The scoped-VMEM rows ran with the recipe's backend.jax.scoped_vmem_kib,
# which the one calibration (XLA's default) predicts as well: 31B +7 %, 12B −7.3 % (crosstune.planner.timing). The
# TWO_PASS rows (2026-12-06, 5f0f388, side by side with the fused backward in one call) ran splash's backward in two
# passes, which the planner counts as 7 matmuls per block pair instead of 5 and so predicts 1.4 % slower.
VMEM = "backend.jax.scoped_vmem_kib=98304"
VMEM_112 = "backend.jax.scoped_vmem_kib=114688"
TWO_PASS = "backend.jax.splash_fused_backward=false"
S4096 = "data.max_seq_len=4096"
# The recompute rows (2026-12-07: dots in stop 58's call, dots_and_attention and the E4B's 12 layers in stop 60's,
# beside no recompute at 0.3752 s): the planner models the unrolled step. A scanned one (SCAN) ran 2-11 % slower and
# held 1-2 GB more on the chip while each layer's recompute kept jax.checkpoint's barrier (its loop copied the
# stacked weights and kept residuals); without it (stop 62) the 31B's 4 layers run 3.5 % slower and hold 0.49 GB
# more, the E4B's 12 hold 1.1 GB less (docs/BENCHMARKS.md). Under either policy the planner holds the kept outputs
# and the larger of the loss's buffers and one layer's recompute (crosstune.planner.estimate: Memory.backward_iteration)
DOTS = ("train.gradient_checkpointing=true", "train.kernels.recompute=dots")
KEPT = ("train.gradient_checkpointing=true", "train.kernels.recompute=dots_and_attention")
FULL = ("train.gradient_checkpointing=true", "train.kernels.recompute=full")
SCAN = "backend.jax.scan_layers=true"
BEST = (S4096, VMEM_112, TWO_PASS)
# the E4B's recipe before it scanned its layers with dots_and_attention (2026-12-07): unrolled, nothing recomputed
E4B_BEFORE = ("train.gradient_checkpointing=false", "train.kernels.recompute=full", "backend.jax.scan_layers=false")
UNROLLED = "backend.jax.scan_layers=false"  # the rows that ran before their recipe scanned its layers
# A scan with nothing recomputed (2026-12-07, stop 61's first call): the planner's time holds (its work is the
# unrolled step's, +2 % measured); its memory counts what the scan's body saves per layer (crosstune.planner.scanned:
# the 31B's 2 layers 12.99 GB planned, 12.87 measured, against 8.30 unrolled)
MEASURED = {
    ("gemma4-31b-tpu-v5p-8", (S4096, UNROLLED), 4): (0.4016, 12.71),
    ("gemma4-31b-tpu-v5p-8", (S4096, VMEM, UNROLLED), 4): (0.3771, 12.76),
    ("gemma4-31b-tpu-v5p-8", (S4096, VMEM_112, UNROLLED), 4): (0.3766, 12.76),
    ("gemma4-31b-tpu-v5p-8", (S4096, VMEM_112, TWO_PASS, UNROLLED), 4): (0.3751, 12.77),
    ("gemma4-31b-tpu-v5p-8", (S4096, TWO_PASS, UNROLLED), 4): (0.4006, 12.72),
    ("gemma4-31b-tpu-v5p-8", (*BEST, *DOTS, UNROLLED), 4): (0.3922, 13.21),
    # scanned, without jax.checkpoint's barrier (stop 64, 2026-12-07; 0.4318 s and 14.91 GB with it, stop 58)
    ("gemma4-31b-tpu-v5p-8", (S4096, *DOTS), 4): (0.4095, 13.90),
    ("gemma4-31b-tpu-v5p-8", (*BEST, *KEPT, UNROLLED), 4): (0.3872, 13.43),
    # scanned without jax.checkpoint's barrier (stop 62; 0.4272 s and 15.25 GB with it, stop 60)
    ("gemma4-31b-tpu-v5p-8", (*BEST, *KEPT, SCAN), 4): (0.4008, 13.92),
    ("gemma4-e4b-tpu-v6e-4", E4B_BEFORE, 12): (0.1902, 10.91),
    # as it ships now, its layers in one scan body (crosstune.train.jax.kv_carry; stop 63): 1 group owning its K/V,
    # 1 reading them, a loop of 2. Stop 62's two segments, one group each (no loop: as unrolled), ran 0.1896 s in
    # 10.91 GB; the planner models the unrolled step (11.94 GB; XLA's compile of these 12 layers unrolled: 12.01)
    ("gemma4-e4b-tpu-v6e-4", (), 12): (0.2025, 12.89),  # 0.2024 s, 12.89 GB again in stop 64
    # stop 64, the same session: two segments forced 0.1897 s, 10.91 GB (not a recipe setting); unrolled:
    ("gemma4-e4b-tpu-v6e-4", (UNROLLED,), 12): (0.1892, 11.87),
    ("gemma3-27b-tpu-v6e-8", (TWO_PASS, UNROLLED), 6): (0.3341, 13.23),
    ("gemma4-e4b-tpu-v6e-4", (*E4B_BEFORE, TWO_PASS), 6): (0.1243, 6.81),
    ("gemma4-31b-tpu-v5p-8", (S4096, UNROLLED), 5): (0.4679, 14.84),
    ("gemma4-12b-tpu-v6e-4", (UNROLLED,), 6): (0.2973, 6.75),
    ("gemma4-e4b-tpu-v6e-4", E4B_BEFORE, 6): (0.1244, 6.80),
    ("gemma4-e4b-tpu-v6e-4", (*E4B_BEFORE, "model.size=e2b"), 6): (0.0746, 4.88),
    ("gemma3-27b-tpu-v6e-8", (UNROLLED,), 6): (0.3328, 13.21),
    ("gemma4-26b-a4b-tpu-v5p-8", (S4096, UNROLLED), 2): (0.1485, 7.80),
    ("gemma4-12b-tpu-v6e-4", (UNROLLED, VMEM), 6): (0.3174, None),
    ("gemma4-31b-tpu-v5p-8", (S4096, "lora.dropout=0", UNROLLED), 4): (0.3905, None),
    ("gemma4-31b-tpu-v5p-8", (S4096, UNROLLED), 2): (0.2692, 8.30),  # 0.2723 on 2026-12-06
    ("gemma4-31b-tpu-v5p-8", (S4096,), 2): (0.2745, 12.87),  # as it ships now: scanned
    # scanned; 10.96 GB with jax.checkpoint's barrier (a4ec15c, before remat.in_scan left it out of a scan: the 31B's
    # 4 layers held 1.33 GB more with it), which the planner (8.96 GB) does not model: time only
    ("gemma4-31b-tpu-v5p-8", (S4096, *KEPT), 2): (0.2866, None),
    ("gemma3-27b-tpu-v6e-8", (UNROLLED,), 2): (0.1745, 6.93),
    ("gemma3-27b-tpu-v6e-8", (), 2): (0.1745, 9.41),  # as it ships now: scanned
    ("gemma4-26b-a4b-tpu-v5p-8", (UNROLLED,), 2): (0.1167, None),
    # 2026-12-07, stop 63, two calls, the first beside an unrolled 0.1486 s: scanned, each MoE layer reading its
    # experts whole in both of ragged_dot's layouts (crosstune.train.jax.moe.WholeMoE) runs as fast as unrolled; with
    # dots_and_attention the MoE's forward runs again in the backward (timing.MOE_RECOMPUTED_SCANNED, fitted to the
    # 2-layer row, the 3-layer one checks it; unrolled, timing.MOE_RECOMPUTED, fitted in stop 62 to a scan since
    # replaced, checked by both unrolled rows). The second layout in the memory: memory._second_layout
    ("gemma4-26b-a4b-tpu-v5p-8", (S4096, SCAN), 2): (0.1486, 13.19),
    ("gemma4-26b-a4b-tpu-v5p-8", (S4096, SCAN, *KEPT), 2): (0.1584, 10.46),
    ("gemma4-26b-a4b-tpu-v5p-8", (S4096, SCAN, *KEPT), 3): (0.1946, 14.57),
    ("gemma4-26b-a4b-tpu-v5p-8", (S4096, UNROLLED, *KEPT), 3): (0.2141, 9.03),
    # its MoE layers' experts (ragged_dot, not a dot the policy keeps) recomputed after the loss, not beside it: 6.91
    # GB planned (7.88, +12 %, summing them; XLA's compile for one v5e: 7.51)
    ("gemma4-26b-a4b-tpu-v5p-8", (S4096, UNROLLED, *KEPT), 2): (0.1713, 7.01),
    # stop 64: full remat, the same session; scanned 7.9 % faster (unrolled, XLA transposes the experts for the
    # backward again in the recompute; WholeMoE keeps both layouts: 3.4 GB more)
    ("gemma4-26b-a4b-tpu-v5p-8", (S4096, SCAN, *FULL), 2): (0.1635, 10.21),
    ("gemma4-26b-a4b-tpu-v5p-8", (S4096, UNROLLED, *FULL), 2): (0.1776, 6.78),
}


def _plan(name: str, sets: tuple[str, ...], layers: int):
    recipe = load_for_plan(RECIPES / f"{name}.yaml", [*sets, *ONE_CHIP])
    return plan_recipe(recipe, "jax", spec=with_layers(plan_recipe(recipe, "jax").spec, layers)), recipe


@pytest.mark.parametrize(("name", "sets", "layers"), list(MEASURED), ids=lambda x: str(x))
def test_predicted_time_and_memory_are_within_ten_percent_of_the_chip(name, sets, layers):
    seconds, peak = MEASURED[(name, sets, layers)]
    plan, recipe = _plan(name, sets, layers)
    predicted = predict_step(plan, recipe)
    assert predicted.micro_step_s == pytest.approx(seconds, rel=CALIBRATED_WITHIN)
    assert "measured on this chip" in predicted.calibration
    vmem = [s.split("=")[1] for s in sets if s.startswith("backend.jax.scoped_vmem_kib=")]
    if vmem:  # it says the calibration was measured at XLA's default, not the recipe's VMEM
        assert f"at XLA's default scoped VMEM, not {vmem[0]} KiB" in predicted.calibration
    else:
        assert "scoped VMEM" not in predicted.calibration
    if peak is not None:
        assert plan.jax_memory.total == pytest.approx(peak, rel=0.10)
    assert SCANNED_MEMORY_NOTE not in plan.notes  # one chip: the scan's residuals are counted


def test_a_scan_without_recompute_counts_its_body_s_residuals():
    """The 31B's 2 layers scanned hold 12.87 GB on the chip, 8.30 unrolled: the planner counts every residual the
    scan's body saves (12.99), not the unrolled working set (8.74); over fsdp it still says XLA holds more."""
    scanned, _ = _plan("gemma4-31b-tpu-v5p-8", (S4096, SCAN), 2)
    unrolled, _ = _plan("gemma4-31b-tpu-v5p-8", (S4096, UNROLLED), 2)
    assert scanned.jax_memory.total == pytest.approx(12.87, rel=0.02)
    assert unrolled.jax_memory.total == pytest.approx(8.74, abs=0.01)
    e4b = load_for_plan(
        RECIPES / "gemma4-e4b-tpu-v6e-4.yaml", ["train.gradient_checkpointing=false", "train.kernels.recompute=full"]
    )
    assert e4b.backend.jax.scan_layers and e4b.backend.jax.mesh.fsdp > 1
    assert SCANNED_MEMORY_NOTE in plan_recipe(e4b, "jax").notes


def test_the_splash_count_is_the_kernel_s():
    """The planner's visited block pairs equal the kernel's own block mask (Pallas interpret mode, on this CPU)."""
    from crosstune.train.jax.attention import FUSED_DKV, MATMULS, _visited_blocks, make_kernel

    for window in (None, 1024, 512):
        for block in (256, 512):
            kernel = make_kernel(window, 4096, 1, True, block, True)
            assert visited_blocks(4096, window, block) == _visited_blocks(kernel), (window, block)
    assert SPLASH_MATMULS == {True: MATMULS["fwd"] + FUSED_DKV, False: sum(MATMULS.values())}


def test_a_chip_never_measured_borrows_the_v5e_s_fractions_and_says_so():
    recipe = load_for_plan(RECIPES / "gemma4-31b-tpu-v5p-8.yaml")
    predicted = predict_step(plan_recipe(recipe, "jax"), recipe)
    assert predicted.calibration.startswith("tpu-v5e, 2026-12-05 (tpu-v5e's fractions, assumed)")
    assert predicted.by_kind()["head"] < predicted.by_kind()["matmul"]  # 60 layers: the layers' matmuls dominate
