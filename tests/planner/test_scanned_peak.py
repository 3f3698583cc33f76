"""A scan with nothing recomputed over fsdp > 1: the planner against XLA's own peak (peak_memory_in_bytes), not its
memory_analysis total (arguments + temp_bytes + code), which reads above what a scanned step's buffers hold at once,
on one chip as over fsdp 2 (docs/BENCHMARKS.md, "The planner against the chip": "A scan's XLA total is not its
peak"). Every figure compiled here (2026-12-07) for the topology, no TPU: `CROSSTUNE_TPU_COMPILE_ENV=.venv-tpu-compile
crosstune plan RECIPE --compile --json --layers N --set backend.jax.scan_layers=true [--set ...]`, the peak from
`xla.peak_bytes`, GB per chip."""

from __future__ import annotations

import pytest

from crosstune.planner import plan_recipe
from crosstune.planner.aot_report import with_layers
from crosstune.planner.planned_recipe import load_for_plan
from tests.helpers.paths import RECIPES

SCAN = "backend.jax.scan_layers=true"
ONE_CHIP = [
    "hardware=tpu-v5e-1",
    "backend.jax.mesh.fsdp=1",
    "backend.jax.mesh.tp=1",
    "serve.tensor_parallel_size=1",
    "data.max_seq_len=4096",
    SCAN,
]
# (recipe, --set, layers) -> (XLA's memory_analysis total, XLA's peak, the chip's measured peak or None)
XLA = {
    # one chip (the ONE_CHIP sets; 2 layers of one kind: 2 groups of 1), the chips' peaks from stop 61 and stop 63
    ("gemma4-31b-tpu-v5p-8", tuple(ONE_CHIP), 2): (14.112, 12.805, 12.87),
    ("gemma4-26b-a4b-tpu-v5p-8", tuple(ONE_CHIP), 2): (14.790, 13.076, 13.19),
    # v5p-8, fsdp 2 × tp 2 (the recipe as shipped, scanned): 2 and 3 groups of 6 layers; not run on a chip
    ("gemma4-26b-a4b-tpu-v5p-8", (SCAN,), 12): (26.623, 22.985, None),
    ("gemma4-26b-a4b-tpu-v5p-8", (SCAN,), 18): (36.496, 32.902, None),
}


def _memory(name: str, sets: tuple[str, ...], layers: int):
    recipe = load_for_plan(RECIPES / f"{name}.yaml", list(sets))
    spec = plan_recipe(recipe, "jax").spec
    return plan_recipe(recipe, "jax", spec=with_layers(spec, layers)).jax_memory


@pytest.mark.parametrize(("name", "sets", "layers"), sorted(XLA))
def test_a_scanned_step_s_planner_is_within_ten_percent_of_xla_s_peak(name, sets, layers):
    """Within 10 % of XLA's peak on one chip and over fsdp 2 alike, and 8-18 % under XLA's memory_analysis
    total: what that total adds over the peak is XLA's temp_bytes, not a tensor the step holds (one chip: the
    chip's measured peak is XLA's peak, within 1 %)."""
    total, peak, chip = XLA[name, sets, layers]
    mem = _memory(name, sets, layers)
    assert abs(mem.total / peak - 1) < 0.10
    assert mem.total / total - 1 < -0.05
    if chip is not None:  # (XLA's peak and the chip's are within 1 % of each other: 12.805/12.87, 13.076/13.19)
        assert mem.total == pytest.approx(chip, rel=0.02)


def test_a_scan_over_fsdp_grows_per_group_as_xla_s_peak_does():
    """Over fsdp 2 the planner's growth per group of 6 layers (12 -> 18 layers: the scan's residuals, weights and
    LoRA state of one group) is XLA's within 5 %: no per-group term is missing."""
    key12, key18 = [("gemma4-26b-a4b-tpu-v5p-8", (SCAN,), n) for n in (12, 18)]
    planner = _memory(*key18).total - _memory(*key12).total
    xla = XLA[key18][1] - XLA[key12][1]
    assert planner == pytest.approx(xla, rel=0.05)


def test_the_compile_report_gives_xla_s_peak_beside_its_total():
    """`plan --compile` reports XLA's peak and the planner against it; a record compiled before has none."""
    import io

    from rich.console import Console

    from crosstune.planner.aot_report import compile_report
    from crosstune.planner.view import render_compiled
    from crosstune.units import GB
    from tests.helpers.compiled_step import compiled_step

    plan = plan_recipe(load_for_plan(RECIPES / "gemma4-26b-a4b-tpu-v5p-8.yaml", [SCAN]), "jax")
    peak = round(plan.jax_memory.total * GB)
    report = compile_report(plan, compiled_step(peak_bytes=peak))
    assert report["xla"]["peak_bytes"] == peak and abs(report["planner"]["relative_to_xla_peak"]) < 1e-9
    out = io.StringIO()
    render_compiled(report, Console(file=out, width=200))
    row = next(line for line in out.getvalue().splitlines() if "XLA's peak" in line)
    assert f"{plan.jax_memory.total:,.2f}" in row and "0.0% vs its peak" in row, row
    before = compile_report(plan, compiled_step())
    assert before["xla"]["peak_bytes"] is None and before["planner"]["relative_to_xla_peak"] is None
    out = io.StringIO()
    render_compiled(before, Console(file=out, width=200))
    assert "XLA's peak" not in out.getvalue()


def test_the_compile_report_s_fit_verdict_reads_xla_s_peak_and_a_record_without_one_its_total():
    """A scanned step whose total is over the chip's usable memory (temp_bytes its buffers don't hold) and whose
    peak is not fits; a record from before, with no peak, is judged by its total.
    Both figures stay in the JSON, and the table says which decided."""
    import dataclasses
    import io

    from rich.console import Console

    from crosstune.planner.aot_report import compile_report
    from crosstune.planner.view import render_compiled
    from crosstune.units import GB
    from tests.helpers.compiled_step import compiled_step

    plan = plan_recipe(load_for_plan(RECIPES / "gemma4-26b-a4b-tpu-v5p-8.yaml", [SCAN]), "jax")
    usable = round(plan.hardware.chip.usable_gb * GB)
    before = compiled_step(scanned=True, temp_bytes=usable)  # 20 GB of arguments over the limit
    now = dataclasses.replace(before, peak_bytes=usable - GB)

    def fits_row(report: dict) -> str:
        out = io.StringIO()
        render_compiled(report, Console(file=out, width=200))
        return next(line for line in out.getvalue().splitlines() if line.lstrip("│ ").startswith("fits"))

    report = compile_report(plan, now)
    assert report["fits"] and report["fits_by"] == "peak" and report["held_bytes_per_device"] == usable - GB
    assert report["xla"]["per_device_bytes"] > usable and report["xla"]["peak_bytes"] == usable - GB
    assert "yes" in fits_row(report) and "by XLA's peak" in fits_row(report)
    old = compile_report(plan, before)
    assert not old["fits"] and old["fits_by"] == "total" and old["held_bytes_per_device"] > usable
    assert "no" in fits_row(old) and "by XLA's total" in fits_row(old)
