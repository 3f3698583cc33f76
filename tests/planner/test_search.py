"""`plan --search`'s choices (crosstune.planner.search) with a stand-in compiler whose figures are known
(tests/helpers/search.py): the candidates of the 31B on a v5p-8, the per-layer extrapolation, the compile budget, the
screen's order, the fit verdict, the winner and its --set lines."""

from __future__ import annotations

import dataclasses

import pytest

from crosstune.hardware import HARDWARE
from crosstune.planner import plan_recipe
from crosstune.planner.planned_recipe import load_for_plan
from crosstune.planner.search import (
    Candidate,
    Result,
    candidates,
    extrapolate,
    run_search,
    scan_tie,
)
from crosstune.planner.search_report import search_json
from crosstune.units import GB
from tests.helpers.search import G4, fake_compiler, planner_memory, rendered_search, step_at


def test_candidates_of_the_31b_on_a_v5p_8_keep_the_global_batch():
    recipe = load_for_plan(G4, ["backend.jax.scan_layers=false"])
    spec = plan_recipe(recipe, "jax").spec
    found = candidates(recipe, spec, HARDWARE["tpu-v5p-8"], rows_total=8)
    meshes = {(c.fsdp, c.tp) for c in found}
    assert meshes == {(4, 1), (2, 2), (1, 4)}  # tp 4 divides 32 heads, 16 and 4 KV heads; no tp above 4 chips
    assert all(c.rows * c.fsdp * c.accumulation == 8 for c in found)
    assert {c.rows for c in found if c.fsdp == 1} == {1, 2, 4, 8} and {c.rows for c in found if c.fsdp == 4} == {1, 2}
    # rows per mesh × remat (none, dots, full) × attention × unrolled or scanned (60 layers: 10 groups of 6)
    assert len(found) == (4 + 3 + 2) * 3 * 2 * 2 and sum(c.scan for c in found) == len(found) // 2
    c = Candidate(None, "splash", 2, 1, 4, 4)
    assert c.overrides(recipe) == [
        "train.gradient_checkpointing=false",
        "train.kernels.recompute=full",
        "backend.jax.attention=splash",
        "train.per_device_batch_size=2",
        "backend.jax.mesh.fsdp=1",
        "backend.jax.mesh.tp=4",
        "train.grad_accumulation=4",
    ]
    again = load_for_plan(G4, c.overrides(recipe))
    assert (again.train.per_device_batch_size * again.train.grad_accumulation, again.backend.jax.attention) == (
        8,
        "splash",
    )
    assert spec.scan_period == 6
    shipped = load_for_plan(G4)  # scanned: the unrolled candidates say so, the scanned ones need no line
    assert c.overrides(shipped) == [*c.overrides(recipe), "backend.jax.scan_layers=false"]
    scan = dataclasses.replace(c, scan=True)
    assert scan.overrides(shipped) == c.overrides(recipe)
    assert scan.overrides(recipe) == [*c.overrides(recipe), "backend.jax.scan_layers=true"]
    assert load_for_plan(G4, scan.overrides(recipe)).backend.jax.scan_layers
    assert scan.label.startswith("scanned, remat none") and c.label.startswith("unrolled, remat none")
    one_group = dataclasses.replace(spec, layer_types=spec.layer_types[:6])  # nothing to repeat: not scanned
    assert not any(c.scan for c in candidates(recipe, one_group, HARDWARE["tpu-v5p-8"], rows_total=8))


def test_extrapolation_is_per_layer():
    a = step_at(6, argument_bytes=6 * GB + 1 * GB, flops=6e13, collective_bytes=6e9, temp_bytes=3 * GB)
    b = step_at(12, argument_bytes=12 * GB + 1 * GB, flops=12e13, collective_bytes=12e9, temp_bytes=4 * GB)
    full = extrapolate(a, b, 60)
    assert full.layers == 60 and full.argument_bytes == 61 * GB and full.flops == pytest.approx(60e13)
    assert full.collective_bytes == pytest.approx(60e9) and full.temp_bytes == 12 * GB  # 4 + (1/6)·48 GB
    assert full.compile_s == 20.0 and full.host_peak_rss_bytes == 12 * 10**8


def test_a_screened_step_fits_by_its_grown_peak_and_by_its_total_where_a_depth_has_no_peak():
    """The screen grows XLA's peak per layer like its total, and the peak decides the fit (a scan's total carries
    temp_bytes no chip holds): 91 GB total, 71 GB peak at 60 layers, on a v5p chip's 85.5. Where one depth reports
    no peak (a record from before) a slope from 0 would be no peak at all: none is grown and the total decides."""
    usable = HARDWARE["tpu-v5p-8"].chip.usable_gb
    a = step_at(6, argument_bytes=7 * GB, temp_bytes=3 * GB, peak_bytes=8 * GB)
    b = step_at(12, argument_bytes=13 * GB, temp_bytes=6 * GB, peak_bytes=15 * GB)
    recipe = load_for_plan(G4)
    c = Candidate(None, "splash", 1, 1, 4, 8, True)

    def screened(step):
        return Result(c, planner_memory(recipe)(c), step=step, stage="screened")

    grown = screened(extrapolate(a, b, 60))
    assert grown.step.per_device_bytes / GB == pytest.approx(91) and grown.held_gb == pytest.approx(71)
    assert grown.step.held_by == "peak" and grown.fits(usable)
    old = screened(extrapolate(dataclasses.replace(a, peak_bytes=0), b, 60))
    assert old.step.peak_bytes == 0 and old.step.held_by == "total" and old.held_gb == pytest.approx(91)
    assert not old.fits(usable)


def test_the_winner_fits_by_xla_s_peak_where_its_total_is_over():
    """Remat none at full depth: XLA's total is over a v5p chip's 85.5 GB by 40 GB of temporaries its buffers don't
    hold, its peak is not: it fits and wins (the fastest roofline); the JSON keeps both figures and says which
    decided, and so does the table. A record without a peak is judged by its total: dots wins."""
    recipe = load_for_plan(G4)
    spec = plan_recipe(recipe, "jax").spec
    hw = HARDWARE["tpu-v5p-8"]
    usable = hw.chip.usable_gb * GB
    found = run_search(recipe, spec, hw, 8, planner_memory(recipe), fake_compiler([], peaks=True), max_compiles=9)
    w = found.winner
    assert w.candidate.remat is None and w.step.per_device_bytes > usable >= w.step.peak_bytes
    row = search_json(found, recipe, hw)["winner"]
    assert row["fits"] and row["fits_by"] == "peak" and row["xla_bytes_per_device"] == w.step.per_device_bytes
    assert row["xla_peak_bytes_per_device"] == w.step.peak_bytes
    assert f"{w.held_gb:,.1f} GB per chip (XLA's peak, full depth)" in rendered_search(found, recipe, hw)
    without = run_search(recipe, spec, hw, 8, planner_memory(recipe), fake_compiler([]), max_compiles=9)
    assert without.winner.candidate.remat == "dots"
    assert search_json(without, recipe, hw)["winner"]["fits_by"] == "total"


def test_search_screens_compiles_finalists_and_picks_the_fastest_that_fits():
    """A stand-in compiler: remat none is fastest but 100 GB per chip at full depth (its temporaries grow faster
    than the screen's extrapolation says: the finalist's full-depth compile catches it), dots is next and fits."""
    recipe = load_for_plan(G4)
    hw = HARDWARE["tpu-v5p-8"]
    spec = plan_recipe(recipe, "jax").spec
    calls = []
    fake_compile = fake_compiler(calls)

    # what the screen should compile: remat none unrolled (the scan holds more), dots and full scanned as the recipe
    only = [
        Candidate(None, "splash", 1, 1, 4, 8),
        *(Candidate(m, "splash", 1, 1, 4, 8, True) for m in ("dots", "full")),
    ]
    base = Candidate("full", "dense", 1, 1, 4, 8, True)
    search = run_search(
        recipe, spec, hw, 8, planner_memory(recipe), fake_compile, max_compiles=8, finalists=2, baseline=base
    )
    assert search.compiles == len(calls) <= 8
    screened = [r for r in search.results if r.stage in ("screened", "final")]
    assert all(calls.count((tuple(r.candidate.overrides(recipe)), d)) == 1 for r in screened for d in (6, 12))
    final = [r for r in search.results if r.stage == "final"]
    assert len(final) == 2 and search.winner is not None
    assert search.winner.fits(0.9 * 95) and search.winner.candidate.remat == "dots"
    loser = next(r for r in final if r.candidate.remat is None)
    assert loser.held_gb == pytest.approx(0.3 * 60 + 0.8 * 60 + 40 + 1e-6, rel=1e-6) and not loser.fits(0.9 * 95)
    assert search.winner.line.tokens_per_s == pytest.approx(3072 / (2.2e12 * 60 / 459e12))
    out = search_json(search, recipe, hw)
    assert out["winner"]["set"] == search.winner.candidate.overrides(recipe) and out["compiles"] == search.compiles
    assert out["frontier"][0]["stage"] == "final" and out["baseline"]["candidate"] == dataclasses.asdict(base)
    assert [r.candidate for r in screened] == only  # the planner's best of each recompute mode, nothing else


def test_the_finalists_are_the_fastest_of_each_recompute_mode():
    """With the budget for it, every recompute mode's fastest screened candidate is compiled at full depth (so the
    planner is checked against XLA on each policy), the fastest mode's first; 3 modes screened (2 compiles each) +
    3 finalists = 9 compiles."""
    recipe = load_for_plan(G4)
    spec = plan_recipe(recipe, "jax").spec
    calls = []

    search = run_search(
        recipe, spec, HARDWARE["tpu-v5p-8"], 8, planner_memory(recipe), fake_compiler(calls), max_compiles=9
    )
    final = [r for r in search.results if r.stage == "final"]
    assert [r.candidate.remat for r in final] == [None, "dots", "full"] and search.compiles == len(calls) == 9
    assert search.winner.candidate.remat == "dots"  # none does not fit at full depth; dots is faster than full


def test_the_search_ranks_by_the_calibrated_time_where_it_has_one():
    """The stand-in compiler's roofline says dots is faster than full (2.2 vs 2.9 e12 flops per layer); a calibrated
    time that says full is faster (as a chip can: the roofline counts flops at peak) decides the winner among what
    fits, and the JSON carries it."""
    recipe = load_for_plan(G4)
    spec = plan_recipe(recipe, "jax").spec
    calls = []

    def seconds(c):
        return {None: 0.5, "dots": 0.9, "full": 0.7}[c.remat]

    hw = HARDWARE["tpu-v5p-8"]
    search = run_search(
        recipe, spec, hw, 8, planner_memory(recipe), fake_compiler(calls), max_compiles=9, plan_time=seconds
    )
    assert search.winner.candidate.remat == "full"  # none does not fit at full depth
    assert search.winner.tokens_per_s == pytest.approx(search.winner.tokens / 0.7)
    assert search_json(search, recipe, hw)["winner"]["predicted_micro_step_s"] == 0.7


def _screened(calls: list, recipe) -> list[Candidate]:
    """The candidates screened, in the order compiled (each first at 6 layers)."""
    by_sets = {tuple(c.overrides(recipe)): c for c in candidates(recipe, _spec(recipe), HARDWARE["tpu-v5p-8"], 8)}
    return [by_sets[sets] for sets, layers in calls if layers == 6]


def _spec(recipe):
    return plan_recipe(recipe, "jax").spec


def test_each_mode_screens_its_fastest_predicted_candidate_first():
    """With a calibrated time, each recompute mode screens what the planner says fits in the order of its predicted
    tokens/s: fsdp 2 × tp 2, predicted 25 % faster here, before tp 4's least memory (77.4 GB against 32.8 with
    nothing recomputed); ties keep the other keys (splash, less memory, the recipe's scan), so dots' unrolled twin
    is screened next, and for full the scan of 2 rows, which holds less than 1 row unrolled (scanned under a
    recompute, one group's weights are gathered at a time: crosstune.planner.memory), the modes still interleaved."""
    recipe = load_for_plan(G4)
    hw = HARDWARE["tpu-v5p-8"]

    def seconds(c):  # per micro-step: in proportion to the tokens, 0.8 of it at fsdp 2 × tp 2
        return c.rows * c.fsdp * {None: 0.10, "dots": 0.11, "full": 0.14}[c.remat] * (0.8 if c.tp == 2 else 1.0)

    calls = []
    memory = planner_memory(recipe)
    run_search(recipe, _spec(recipe), hw, 8, memory, fake_compiler(calls), max_compiles=15, plan_time=seconds)
    first = Candidate(None, "splash", 1, 2, 2, 4)
    assert _screened(calls, recipe) == [
        first,
        Candidate("dots", "splash", 1, 2, 2, 4, True),
        Candidate("full", "splash", 1, 2, 2, 4, True),
        Candidate(None, "splash", 1, 1, 4, 8),
        Candidate("dots", "splash", 1, 2, 2, 4),
        Candidate("full", "splash", 2, 2, 2, 2, True),
    ]
    assert memory(first).total > memory(Candidate(None, "splash", 1, 1, 4, 8)).total
    two_rows_scanned, one_row_unrolled = (
        Candidate("full", "splash", 2, 2, 2, 2, True),
        Candidate("full", "splash", 1, 2, 2, 4),
    )
    assert memory(two_rows_scanned).total < memory(one_row_unrolled).total


def test_without_a_calibrated_time_the_screen_order_is_the_planner_s_memory_order():
    """No plan_time: within a mode what fits, splash, larger tp, less memory, the recipe's scan (as before the
    calibrated time ordered the screen)."""
    recipe = load_for_plan(G4)
    calls = []
    run_search(
        recipe, _spec(recipe), HARDWARE["tpu-v5p-8"], 8, planner_memory(recipe), fake_compiler(calls), max_compiles=15
    )
    assert _screened(calls, recipe) == [
        Candidate(None, "splash", 1, 1, 4, 8),
        Candidate("dots", "splash", 1, 1, 4, 8, True),
        Candidate("full", "splash", 1, 1, 4, 8, True),
        Candidate(None, "splash", 2, 1, 4, 4),
        Candidate("dots", "splash", 1, 1, 4, 8),
        Candidate("full", "splash", 1, 1, 4, 8),
    ]


def test_a_scanned_screen_grows_its_loop_s_runs_per_layer():
    """At 6 layers the scan is one group (its loop runs once), at 12 two: cost_analysis's figure stays one group's,
    the loop's other runs grow per layer, and the 60 layers' total is the unrolled step's."""
    a = step_at(6, flops=6e12, loop_flops=0.0, loops_counted=True, scanned=True)
    b = step_at(12, flops=6e12, loop_flops=6e12, loops_counted=True, scanned=True)
    full = extrapolate(a, b, 60)
    assert full.flops == 6e12 and full.total_flops == pytest.approx(60e12) and full.roofline_note is None
    old = extrapolate(dataclasses.replace(a, loops_counted=False), b, 60)
    assert old.roofline_note is not None  # one depth's loops uncounted: the grown cost is unknown


@pytest.mark.parametrize("shipped_scan", [True, False], ids=["recipe-scanned", "recipe-unrolled"])
def test_scanned_and_unrolled_predicted_alike_tie_to_the_recipe_s_setting_and_the_note_says_what_the_scan_buys(
    shipped_scan,
):
    """A dense model's scanned and unrolled steps do the same work: the planner predicts them alike, so the winner
    keeps the recipe's setting and a note gives the twin's time, the compile times of both and their memory."""
    base = (f"backend.jax.scan_layers={str(shipped_scan).lower()}",)
    recipe = load_for_plan(G4, list(base))
    spec = plan_recipe(recipe, "jax").spec
    hw = HARDWARE["tpu-v5p-8"]

    def seconds(c):  # none slowest: the finalists are full, dots, none (not fitting), then full's twin
        return {None: 1.5, "dots": 0.9, "full": 0.7}[c.remat]

    calls = []
    budget = {"max_compiles": 16, "finalists": 4, "plan_time": seconds}
    found = run_search(recipe, spec, hw, 8, planner_memory(recipe, base), fake_compiler(calls, base=base), **budget)
    w = found.winner
    assert w.candidate.remat == "full" and w.candidate.scan == shipped_scan
    twin = next(r for r in found.results if r.candidate == dataclasses.replace(w.candidate, scan=not shipped_scan))
    assert twin.stage == "final" and twin.line.compute_s == pytest.approx(w.line.compute_s)  # loops counted
    (tie,) = [n for n in found.notes if "the scan buys compile time" in n]
    assert tie.startswith(twin.candidate.label) and "within the calibration's ±10 %" in tie
    assert "here at full depth: 12 s against 62 s" in tie  # build + lower + XLA: scanned, unrolled
    out = search_json(found, recipe, hw)
    assert out["winner"]["candidate"]["scan"] == shipped_scan and tie in out["notes"]
    assert {r["candidate"]["scan"] for r in out["frontier"]} == {True, False}
    table = rendered_search(found, recipe, hw)
    assert "scanned, remat full" in table and "unrolled, remat full" in table and "the scan buys compile time" in table


def test_the_note_names_a_twin_only_where_it_fits():
    """The 31B with nothing recomputed at 4 rows per chip: 73.7 GB unrolled, 170.6 GB scanned (every residual of the
    scan's body kept) of the 85.5 a v5p chip's program may hold: no note offers that scan; at 1 row (32.8 and 57.0
    GB) it does, unless XLA failed to compile it."""
    recipe = load_for_plan(G4)
    usable = HARDWARE["tpu-v5p-8"].chip.usable_gb

    def twins(rows: int) -> list[Result]:  # unrolled, scanned; predicted alike
        unrolled = Candidate(None, "splash", rows, 1, 4, 8 // rows)
        pair = (unrolled, dataclasses.replace(unrolled, scan=True))
        return [Result(c, planner_memory(recipe)(c), predicted_s=0.3 * rows, tokens=3072 * rows) for c in pair]

    four, one = twins(4), twins(1)
    assert four[0].planner.fits and not four[1].planner.fits and one[1].planner.fits
    assert scan_tie(four, four[0], usable) is None
    assert scan_tie(one, one[0], usable).startswith("scanned, remat none, splash, 1 row(s)/device")
    failed = [one[0], dataclasses.replace(one[1], stage="failed", error="RESOURCE_EXHAUSTED")]
    assert scan_tie(failed, failed[0], usable) is None  # screened, as the twin now often is, and XLA refused it


def test_a_scanned_record_whose_loops_were_not_counted_gives_no_roofline():
    """A cached compile from before the loops' runs were counted: its flops are one group's, so neither the screen
    nor a finalist prints a roofline for it, and the notes and the JSON say why."""
    recipe = load_for_plan(G4)
    spec = plan_recipe(recipe, "jax").spec
    hw = HARDWARE["tpu-v5p-8"]
    found = run_search(
        recipe, spec, hw, 8, planner_memory(recipe), fake_compiler([], loops_counted=False), max_compiles=9
    )
    scanned = [r for r in found.results if r.step is not None and r.candidate.scan]
    assert scanned and all(r.line is None for r in scanned)
    assert any(n.startswith(scanned[0].candidate.label) and "compile it again" in n for n in found.notes)
    out = search_json(found, recipe, hw)
    row = next(r for r in out["frontier"] if r["candidate"]["scan"])
    assert row["roofline"] is None and "counts a loop's body once" in row["roofline_note"]
    assert found.winner.line is None and "no roofline" in rendered_search(found, recipe, hw)
