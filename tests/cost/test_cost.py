"""Cost model: the seed's published figures, hand-computed training/serving/TCO cases, and clear failures."""

import json

import pytest

from crosstune.cost.costs import serving_costs, tokens_per_s_at_mfu, training_cost
from crosstune.cost.prices import PriceBook, load_prices
from crosstune.cost.source_study import (
    SEED_TCO_WORKLOAD,
    gpu_serving_bill_for_ratio,
    seed_options,
    seed_training,
)
from crosstune.cost.tco import Option, Workload, break_even, tco_ratio
from crosstune.errors import CrosstuneError, InputError
from crosstune.families import get_family
from crosstune.hardware import HARDWARE
from crosstune.run.run_summary import read_run
from crosstune.servebench.slo import SloError
from crosstune.servebench.summary_cells import knee, read_sweep, saturation_point, slo_point
from tests.helpers.report import GPU_SWEEP, TPU_SWEEP, write_run

# Money is rounded to cents as the seed published it; the products below are exact decimals, so 0.005 is rounding.
CENT = 0.005


def test_seed_training_costs_and_ratio():
    tpu, gpu = seed_training()
    assert tpu.price.per_hour == pytest.approx(16.80) and gpu.price.per_hour == pytest.approx(22.12)
    assert tpu.step_cost == pytest.approx(56.11, abs=CENT)  # 3.34 h × $16.80
    assert gpu.step_cost == pytest.approx(119.23, abs=CENT)  # 5.39 h × $22.12
    assert round(gpu.step_cost / tpu.step_cost, 2) == 2.12
    assert round(gpu.step_hours / tpu.step_hours, 2) == 1.61  # "1.61× faster" is the hours ratio
    assert tpu.is_assumption and gpu.is_assumption  # the seed's hours are inputs, not crosstune measurements


def test_seed_tco_assumptions():
    """Which assumption reproduces the seed's 1.82× TCO, and what the per-token alternative would need."""
    tpu, gpu = seed_options()
    # 41 % cheaper per output token at 4096: v6e-8 $21.60/h at 1.66× the throughput of 2×H100 at $22.12/h.
    assert 1 - tpu.serve.usd_per_m_output / gpu.serve.usd_per_m_output == pytest.approx(0.412, abs=5e-4)
    # Reproduces: one training run + the endpoint up one hour on each target.
    assert round(tco_ratio(gpu, tpu, SEED_TCO_WORKLOAD), 2) == 1.82
    # Per-token billing: the ratio falls from 2.12× (no serving) to 1/0.588 = 1.70× (serving dominates) and is
    # 1.82× only where the GPU serving bill is about $242 (≈ 10.9 h of 2×H100) — a volume the seed never states.
    bill = gpu_serving_bill_for_ratio(1.82)
    assert bill == pytest.approx(242.21, abs=0.01)
    tokens_per_day = bill / gpu.serve.usd_per_m_output * 1e6
    assert tco_ratio(gpu, tpu, Workload(days=1, serve_tokens_per_day=tokens_per_day)) == pytest.approx(1.82)
    assert tco_ratio(gpu, tpu, Workload(days=0, serve_tokens_per_day=1e6)) == pytest.approx(2.1248, abs=1e-4)
    assert tco_ratio(gpu, tpu, Workload(days=1e9, serve_tokens_per_day=1e6)) == pytest.approx(1.70, abs=0.005)


def test_training_cost_of_a_run_by_hand(tmp_path):
    run = read_run(write_run(tmp_path, "jax", "tpu-v5p-8", steps=20, step_time_s=1.5, trained_tokens=900))
    c = training_cost(run, PriceBook())
    assert run.step_time_s == pytest.approx(30.0) and run.wall_time_s == pytest.approx(45.0)  # + 12 compile + 3 saves
    assert c.step_cost == pytest.approx(30 / 3600 * 16.80)
    assert c.wall_cost == pytest.approx(45 / 3600 * 16.80)
    assert c.usd_per_m_trained == pytest.approx(30 / 3600 * 16.80 / 18_000 * 1e6)
    assert c.usd_per_m_trained_wall == pytest.approx(45 / 3600 * 16.80 / 18_000 * 1e6)


def test_run_without_timing_data_says_what_is_missing(tmp_path):
    run = read_run(write_run(tmp_path, "torch", "2xh100", timing=False))
    c = training_cost(run, PriceBook())
    assert c.step_cost > 0 and c.wall_cost is None and c.usd_per_m_trained_wall is None
    assert any("compile_time_s / checkpoint_time_s" in n for n in c.notes)
    (run.path / "metrics.jsonl").write_text("")
    with pytest.raises(InputError, match="no metrics rows"):
        read_run(run.path)
    (run.path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    with pytest.raises(CrosstuneError, match=r"metrics.jsonl:1: row lacks epoch, learning_rate, grad_norm, trained_t"):
        read_run(run.path)


def test_rows_logged_every_k_steps_stand_for_k_steps(tmp_path):
    """torch logs every log_every steps with step_time_s = the mean since the previous row."""
    run = read_run(write_run(tmp_path, "torch", "2xh100", steps=20, log_every=5, step_time_s=1.5, trained_tokens=900))
    assert len(run.rows) == 4 and run.extrapolated
    assert run.step_time_s == pytest.approx(30.0) and run.trained_tokens == 18_000


def test_prices_from_recipe_yaml_file_and_missing_price(tmp_path):
    run = read_run(write_run(tmp_path / "a", "torch", "cpu"))
    with pytest.raises(InputError, match=r"no on-demand price for cpu .*--prices FILE"):
        training_cost(run, PriceBook())
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "chips:\n  cpu: {on_demand: 0.04, source: my laptop, date: 2026-11}\n"
        "targets:\n  2xh100: {on_demand: 19.5, spot: 7.0}\n"
    )
    book = load_prices(prices)
    assert training_cost(run, book).price.per_hour == pytest.approx(0.04)
    assert book.price("2xh100").per_hour == 19.5 and book.price("2xh100", "spot").per_hour == 7.0
    assert book.price("8xh100").per_hour == pytest.approx(8 * 11.06)  # untouched targets keep the catalog price
    run.recipe.cost.price_per_hour = 1.25  # the recipe's own override of its hardware
    c = training_cost(run, book)
    assert c.price.per_hour == 1.25 and c.price.source == "recipe cost.price_per_hour"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("chips:\n  tpu-v9: {on_demand: 1}\n", r"chips.tpu-v9: unknown chip"),
        ("targets:\n  2xh100: {on_demand: -3}\n", r"targets.2xh100.on_demand: -3 is not a number > 0 and <= 2000"),
        ("chips:\n  h100: {price: 3}\n", r"chips.h100: expected a mapping with keys"),
        ("gpus: {}\n", r"expected top-level keys `chips` and/or `targets`"),
        # a number that isn't a plausible price (a NaN printed `$nan/h`), a date that isn't text, twice a key
        ("chips:\n  h100: {on_demand: .nan}\n", r"chips.h100.on_demand: nan is not a finite number > 0"),
        ("chips:\n  h100: {on_demand: .inf}\n", r"chips.h100.on_demand: inf is not a finite number > 0"),
        ("chips:\n  h100: {on_demand: '3.5'}\n", r"chips.h100.on_demand: '3.5' is not a number > 0"),
        (
            "chips:\n  h100: {on_demand: 5000}\n",
            r"h100.on_demand: 5000 is not a number > 0 and <= 1000 \(\$/chip-hour\)",
        ),
        ("chips:\n  h100: {on_demand: 3, date: 2026}\n", r"chips.h100.date: 2026 is not text \(quote it\)"),
        ("chips:\n  h100: {on_demand: 3, on_demand: 4}\n", r":2: not valid YAML: duplicate key 'on_demand'"),
        # a value of the wrong shape (sorting a number's or mixed keys raised a TypeError in the message)
        ("42\n", r"expected top-level keys `chips` and/or `targets`, got int 42"),
        ("[1, a]\n", r"expected top-level keys `chips` and/or `targets`, got list \[1, 'a'\]"),
        ("1: x\nchips: {}\n", r"expected top-level keys `chips` and/or `targets`, got keys 1, 'chips'"),
        ("chips: 42\n", r"`chips` must be a mapping of names to price entries, not int 42"),
        ("targets: [cpu]\n", r"`targets` must be a mapping of names to price entries, not list \['cpu'\]"),
    ],
)
def test_bad_prices_file_names_file_and_key(tmp_path, text, message):
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as e:
        load_prices(path)
    assert str(path) in str(e.value)


def test_catalog_is_the_planner_catalog_with_sourced_prices():
    for name in ("tpu-v5p-8", "tpu-v6e-8", "tpu-v5e-8", "2xh100", "1xh200", "1xa100", "cpu"):
        hw = HARDWARE[name]
        assert hw.chip.hbm_gb is None or hw.chip.hbm_gb > 0
        if hw.chip.price_per_chip_hour is not None:
            assert hw.chip.price_source and hw.chip.price_date
    assert HARDWARE["tpu-v5p-8"].devices == 4 and HARDWARE["tpu-v6e-8"].devices == 8  # cores vs chips naming


def test_serving_cost_at_saturation_by_hand():
    gpu, tpu = read_sweep(GPU_SWEEP), read_sweep(TPU_SWEEP)
    assert (saturation_point(gpu, 4096).concurrency, saturation_point(gpu, 4096).output_throughput) == (8, 800.0)
    assert knee(tpu, 4096).concurrency == 32
    costs = {c.context_len: c for c in serving_costs(gpu, PriceBook())}
    assert costs[4096].usd_per_m_output == pytest.approx(22.12 / (800.0 * 3600) * 1e6)
    tpu_4096 = next(c for c in serving_costs(tpu, PriceBook()) if c.context_len == 4096)
    assert tpu_4096.usd_per_m_output == pytest.approx(21.60 / (1328.0 * 3600) * 1e6)


def test_no_load_meets_the_slo_is_a_clear_message_not_a_division(tmp_path):
    gpu = read_sweep(GPU_SWEEP)
    with pytest.raises(InputError, match=r"no load at context 8192 meets the SLO \(p99_ttft_ms <= 1,000\)"):
        slo_point(gpu, 8192, {"p99_ttft_ms": 1000})
    costs = {c.context_len: c for c in serving_costs(gpu, PriceBook(), slo={"p99_ttft_ms": 1000})}
    assert costs[8192].cell is None and costs[8192].usd_per_m_output is None and "meets the SLO" in costs[8192].error
    assert costs[2048].cell.concurrency == 16  # the highest load whose p99 TTFT is within 1 s
    with pytest.raises(SloError, match="unknown SLO name 'p99_ttft'"):
        slo_point(gpu, 4096, {"p99_ttft": 1000})


def test_failed_requests_miss_every_slo_and_zero_throughput_has_no_cost(tmp_path):
    path = tmp_path / "sweep.json"
    cells = [
        {
            "context_len": 128,
            "concurrency": 1,
            "completed": 0,
            "failed": 4,
            "output_throughput": 0.0,
            "p99_ttft_ms": 5.0,
        }
    ]
    path.write_text(json.dumps({"target": "2xh100", "cells": cells}))
    sweep = read_sweep(path)
    assert sweep.cells[0].slo_misses({"p99_ttft_ms": 100}) == ["4 failed request(s)", "no completed request"]
    [cost] = serving_costs(sweep, PriceBook())
    assert cost.usd_per_m_output is None and "completed a request" in cost.error


def test_bench_summary_with_a_missing_field_names_the_cell(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"cells": [{"context_len": 1, "concurrency": 1, "completed": 1}]}))
    with pytest.raises(InputError, match=r"cells\[0\] lacks output_throughput"):
        read_sweep(path)
    with pytest.raises(InputError, match="names no `target`"):
        path.write_text(
            json.dumps({"cells": [{"context_len": 1, "concurrency": 1, "completed": 1, "output_throughput": 5}]})
        )
        serving_costs(read_sweep(path), PriceBook())


def test_break_even_by_hand():
    tpu, gpu = seed_options()
    a = Option("A", tpu.train, tpu.serve)
    b = Option("B", gpu.train, gpu.serve)
    w = Workload(days=10, serve_hours_per_day=1.0)
    # A: 56.112 + 21.60·d; B: 119.2268 + 22.12·d: A is cheaper on every day.
    assert break_even(a, b, w).days is None and "A is cheaper on every day" in break_even(a, b, w).message
    # Swap the serving targets: A trains cheaper but serves dearer (22.12 vs 21.60 a day): they cross on day
    # (119.2268 − 56.112) / 0.52.
    crossing = break_even(Option("A", tpu.train, gpu.serve), Option("B", gpu.train, tpu.serve), w)
    assert crossing.days == pytest.approx((119.2268 - 56.112) / (22.12 - 21.60))
    assert "A is cheaper until day 121.4, B after" in crossing.message


def test_what_if_mfu_matches_the_hand_calculation():
    spec = get_family("gemma4").spec("31b")
    flops = spec.lora_train_flops_per_token(4096, recompute_activations=False)
    rate = tokens_per_s_at_mfu("tpu-v5p-8", 0.40, flops)
    assert rate == pytest.approx(0.40 * 4 * 459e12 / flops)
    # hardware-cost notes: ≈ 1,440 tokens/s per v5p chip at 40 % MFU (4N, 63.6 GFLOP forward at 4096); the
    # family's FLOP count differs from that hand figure by a few percent
    assert rate / 4 == pytest.approx(1440, rel=0.05)
    with pytest.raises(InputError, match="MFU means nothing"):
        tokens_per_s_at_mfu("cpu", 0.4, flops)


def test_a_rate_sweep_is_read_with_its_request_rate_as_the_load(tmp_path):
    """`bench serve --request-rate` writes concurrency null and the rate; the reader takes the rate as the load."""
    from crosstune.servebench.summary_cells import read_sweep

    cell = {"context_len": 512, "concurrency": None, "request_rate": 2.5, "completed": 10, "output_throughput": 40.0}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"cells": [cell]}))
    assert read_sweep(path).cells[0].concurrency == 2.5
    path.write_text(json.dumps({"cells": [{**cell, "request_rate": None}]}))
    with pytest.raises(InputError, match=r"lacks concurrency \(or request_rate\)"):
        read_sweep(path)
