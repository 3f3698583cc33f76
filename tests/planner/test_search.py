"""`plan --search`'s choices (crosstune.planner.search) with a stand-in compiler whose figures are known: the
candidates of the 31B on a v5p-8, the per-layer extrapolation, the compile budget, the winner and its --set lines."""

from __future__ import annotations

import dataclasses

import pytest

from crosstune.hardware import HARDWARE
from crosstune.planner import plan_recipe
from crosstune.planner.aot_report import CompiledStep
from crosstune.planner.planned_recipe import load_for_plan
from crosstune.planner.search import Candidate, candidates, extrapolate, period, run_search, search_json
from crosstune.units import GB
from tests.helpers.paths import REPO

G4 = REPO / "recipes" / "gemma4-31b-tpu-v5p-8.yaml"


def _step(layers: int, **kw) -> CompiledStep:
    base = dict(
        topology="v5p:2x2x1",
        device_kind="TPU v5",
        devices=4,
        layers=layers,
        model_layers=60,
        micro_batch_tokens=3072,
        accumulation=8,
        argument_bytes=0,
        output_bytes=0,
        alias_bytes=0,
        temp_bytes=0,
        generated_code_bytes=1000,
        flops=0.0,
        bytes_accessed=0.0,
        build_s=1.0,
        lower_s=1.0,
        compile_s=10.0,
        host_peak_rss_bytes=layers * 10**8,
    )
    return CompiledStep(**{**base, **kw})


def test_candidates_of_the_31b_on_a_v5p_8_keep_the_global_batch():
    recipe = load_for_plan(G4, ["backend.jax.scan_layers=false"])
    spec = plan_recipe(recipe, "jax").spec
    found = candidates(recipe, spec, HARDWARE["tpu-v5p-8"], rows_total=8)
    meshes = {(c.fsdp, c.tp) for c in found}
    assert meshes == {(4, 1), (2, 2), (1, 4)}  # tp 4 divides 32 heads, 16 and 4 KV heads; no tp above 4 chips
    assert all(c.rows * c.fsdp * c.accumulation == 8 for c in found)
    assert {c.rows for c in found if c.fsdp == 1} == {1, 2, 4, 8} and {c.rows for c in found if c.fsdp == 4} == {1, 2}
    assert len(found) == (4 + 3 + 2) * 3 * 2  # rows per mesh × remat (none, dots, full) × attention
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
    assert period(spec) == 6
    scanned = load_for_plan(G4)  # as shipped, scanned: searched unrolled (a scan hides its loop's work)
    assert c.overrides(scanned) == [*c.overrides(recipe), "backend.jax.scan_layers=false"]


def test_extrapolation_is_per_layer():
    a = _step(6, argument_bytes=6 * GB + 1 * GB, flops=6e13, collective_bytes=6e9, temp_bytes=3 * GB)
    b = _step(12, argument_bytes=12 * GB + 1 * GB, flops=12e13, collective_bytes=12e9, temp_bytes=4 * GB)
    full = extrapolate(a, b, 60)
    assert full.layers == 60 and full.argument_bytes == 61 * GB and full.flops == pytest.approx(60e13)
    assert full.collective_bytes == pytest.approx(60e9) and full.temp_bytes == 12 * GB  # 4 + (1/6)·48 GB
    assert full.compile_s == 20.0 and full.host_peak_rss_bytes == 12 * 10**8


def _fake_compiler(calls: list):
    """remat none: 0.8 GB of temporaries per layer and 40 GB more at full depth than the screen's extrapolation
    says; dots 0.5 GB, full 0.05 GB per layer; flops 2.0 / 2.2 / 2.9 e12 per layer."""

    def fake_compile(overrides, layers):
        calls.append((tuple(overrides), layers))
        r = load_for_plan(G4, overrides)
        n = layers or 60
        remat = None if not r.train.gradient_checkpointing else r.train.kernels.recompute
        per_layer = {None: 0.8, "dots": 0.5, "full": 0.05}[remat] * GB
        temp = per_layer * n + (40 * GB if remat is None and layers is None else 0)
        flops = {None: 2.0, "dots": 2.2, "full": 2.9}[remat] * 1e12 * n
        return _step(
            n,
            argument_bytes=round(0.3 * GB * n),
            temp_bytes=round(temp),
            flops=flops,
            bytes_accessed=1e10 * n,
            collective_bytes=1e8 * n,
        )

    return fake_compile


def test_search_screens_compiles_finalists_and_picks_the_fastest_that_fits():
    """A stand-in compiler: remat none is fastest but 100 GB per chip at full depth (its temporaries grow faster
    than the screen's extrapolation says: the finalist's full-depth compile catches it), dots is next and fits."""
    recipe = load_for_plan(G4)
    hw = HARDWARE["tpu-v5p-8"]
    spec = plan_recipe(recipe, "jax").spec
    calls = []
    fake_compile = _fake_compiler(calls)

    def memory(c):
        return plan_recipe(load_for_plan(G4, c.overrides(recipe)), "jax").jax_memory

    only = [Candidate(r, "splash", 1, 1, 4, 8) for r in (None, "dots", "full")]  # what the screen should compile
    base = Candidate("full", "dense", 1, 1, 4, 8)
    search = run_search(recipe, spec, hw, 8, memory, fake_compile, max_compiles=8, finalists=2, baseline=base)
    assert search.compiles == len(calls) <= 8
    screened = [r for r in search.results if r.stage in ("screened", "final")]
    assert all(calls.count((tuple(r.candidate.overrides(recipe)), d)) == 1 for r in screened for d in (6, 12))
    final = [r for r in search.results if r.stage == "final"]
    assert len(final) == 2 and search.winner is not None
    assert search.winner.fits(0.9 * 95) and search.winner.candidate.remat == "dots"
    loser = next(r for r in final if r.candidate.remat is None)
    assert loser.xla_gb == pytest.approx(0.3 * 60 + 0.8 * 60 + 40 + 1e-6, rel=1e-6) and not loser.fits(0.9 * 95)
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

    def memory(c):
        return plan_recipe(load_for_plan(G4, c.overrides(recipe)), "jax").jax_memory

    search = run_search(recipe, spec, HARDWARE["tpu-v5p-8"], 8, memory, _fake_compiler(calls), max_compiles=9)
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

    def memory(c):
        return plan_recipe(load_for_plan(G4, c.overrides(recipe)), "jax").jax_memory

    def seconds(c):
        return {None: 0.5, "dots": 0.9, "full": 0.7}[c.remat]

    hw = HARDWARE["tpu-v5p-8"]
    search = run_search(recipe, spec, hw, 8, memory, _fake_compiler(calls), max_compiles=9, plan_time=seconds)
    assert search.winner.candidate.remat == "full"  # none does not fit at full depth
    assert search.winner.tokens_per_s == pytest.approx(search.winner.tokens / 0.7)
    assert search_json(search, recipe, hw)["winner"]["predicted_micro_step_s"] == 0.7
