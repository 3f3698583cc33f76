"""The planner's step time (crosstune.planner.timing) against what the TPU v5e chip measured (`plan --run`,
docs/BENCHMARKS.md "TPU v5e chip, measured"): within ±10 % on every measured shape; its splash count is the
kernel's own; a chip never measured borrows the v5e's fractions and says so."""

from __future__ import annotations

import pytest

from crosstune.planner import plan_recipe
from crosstune.planner.aot_report import with_layers
from crosstune.planner.planned_recipe import load_for_plan
from crosstune.planner.timing import SPLASH_MATMULS, predict_step, visited_blocks
from tests.helpers.paths import RECIPES

ONE_CHIP = ["hardware=tpu-v5e-1", "backend.jax.mesh.fsdp=1", "backend.jax.mesh.tp=1", "serve.tensor_parallel_size=1"]
# (recipe, --set, layers) -> (s per micro-step, peak GB) measured on the chip (docs/BENCHMARKS.md, "The planner against
# the chip"); each peak is a process's own (memory_stats counts from the process's start). The rows with a peak ran
# the step as it is now (2026-12-06: the loss's chunks one at a time); None: measured before that (the program then
# held more loss buffers: E2B 6.32 GB against 4.98 now) or after a larger shape in the same process. The 2-layer rows
# ran with 16-bit dropout draws (0.5 % faster than the step as it is: the 31B's 4 layers ran 0.4077 s against 0.4096 s).
# The scoped-VMEM rows ran with the recipe's backend.jax.scoped_vmem_kib (2026-12-06), which the one calibration
# (XLA's default) predicts as well: 31B +5.7 %, 12B −7.3 % (crosstune.planner.timing).
VMEM = "backend.jax.scoped_vmem_kib=98304"
MEASURED = {
    ("gemma4-31b-tpu-v5p-8", ("data.max_seq_len=4096",), 4): (0.4073, 12.86),
    ("gemma4-31b-tpu-v5p-8", ("data.max_seq_len=4096", VMEM), 4): (0.3815, 12.91),
    ("gemma4-12b-tpu-v6e-4", (VMEM,), 6): (0.3174, 8.49),
    ("gemma4-31b-tpu-v5p-8", ("data.max_seq_len=4096",), 5): (0.4777, 14.85),
    ("gemma4-31b-tpu-v5p-8", ("data.max_seq_len=4096", "lora.dropout=0"), 4): (0.3905, None),
    ("gemma4-12b-tpu-v6e-4", (), 6): (0.3094, 8.41),
    ("gemma4-e4b-tpu-v6e-4", (), 6): (0.1278, 6.84),
    ("gemma4-e4b-tpu-v6e-4", ("model.size=e2b",), 6): (0.0764, 4.98),
    ("gemma3-27b-tpu-v6e-8", (), 6): (0.3382, None),
    ("gemma4-26b-a4b-tpu-v5p-8", ("data.max_seq_len=4096",), 2): (0.1559, None),
    ("gemma4-31b-tpu-v5p-8", ("data.max_seq_len=4096",), 2): (0.2723, None),
    ("gemma4-26b-a4b-tpu-v5p-8", (), 2): (0.1167, None),
}


def _plan(name: str, sets: tuple[str, ...], layers: int):
    recipe = load_for_plan(RECIPES / f"{name}.yaml", [*sets, *ONE_CHIP])
    return plan_recipe(recipe, "jax", spec=with_layers(plan_recipe(recipe, "jax").spec, layers)), recipe


@pytest.mark.parametrize(("name", "sets", "layers"), list(MEASURED), ids=lambda x: str(x))
def test_predicted_time_and_memory_are_within_ten_percent_of_the_chip(name, sets, layers):
    seconds, peak = MEASURED[(name, sets, layers)]
    plan, recipe = _plan(name, sets, layers)
    predicted = predict_step(plan, recipe)
    assert predicted.micro_step_s == pytest.approx(seconds, rel=0.10)
    assert "measured on this chip" in predicted.calibration
    assert ("not 98304 KiB" in predicted.calibration) == (VMEM in sets)  # it says which VMEM it was measured at
    if peak is not None:
        assert plan.jax_memory.total == pytest.approx(peak, rel=0.10)


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
