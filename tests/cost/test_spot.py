"""Spot / preemptible capacity next to on-demand (crosstune.cost.spot), by hand: the lost work of a
preemption (steps since the last checkpoint + restart + compile, from the run) is its own term."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.cost.prices import PriceBook, load_prices
from crosstune.cost.spot import spot_cost
from crosstune.run.run_summary import read_run
from tests.helpers.report import write_run

PRICES = "chips:\n  tpu-v5p: {spot: 1.30, source: a spot quote, date: 2026-11}\n"


def test_the_lost_work_of_a_preemption_and_the_break_even_rate_by_hand(tmp_path):
    run = read_run(write_run(tmp_path, "jax", "tpu-v5p-8", steps=20, step_time_s=1.5))  # compile 12 s, saves 3 s
    (tmp_path / "prices.yaml").write_text(PRICES)
    s = spot_cost(run, load_prices(tmp_path / "prices.yaml"), restart_s=600, rate_per_hour=0.1)
    assert (s.checkpoint_every, s.step_s, s.compile_s) == (100, 1.5, 12.0)  # the recipe's default, the run's mean
    assert s.lost_s == pytest.approx(100 / 2 * 1.5 + 600 + 12)  # 687 s
    assert s.lost_worst_s == pytest.approx(100 * 1.5 + 600 + 12)
    assert s.on_demand.per_hour == pytest.approx(16.80) and s.spot.per_hour == pytest.approx(4 * 1.30)
    assert s.hours == pytest.approx(45 / 3600)  # steps + compile + saves
    assert s.spot_hours == pytest.approx(45 / 3600 / (1 - 0.1 * 687 / 3600))
    assert s.spot_cost == pytest.approx(s.spot_hours * 5.20)
    assert s.lost_cost == pytest.approx((s.spot_hours - 45 / 3600) * 5.20)
    assert s.preemptions == pytest.approx(0.1 * s.spot_hours)
    assert s.break_even_per_hour == pytest.approx((1 - 5.20 / 16.80) / (687 / 3600))  # 3.62 preemptions/h
    at_break_even = spot_cost(run, load_prices(tmp_path / "prices.yaml"), rate_per_hour=s.break_even_per_hour)
    assert at_break_even.spot_cost == pytest.approx(s.on_demand_cost)  # the definition, checked
    assert spot_cost(run, PriceBook(), rate_per_hour=6.0).spot is None  # the catalog has no sourced v5p spot price
    assert spot_cost(run, load_prices(tmp_path / "prices.yaml"), rate_per_hour=6.0).spot_hours is None  # r·L > 1


def test_cost_train_prints_spot_beside_on_demand_with_the_lost_work_term(tmp_path):
    run = write_run(tmp_path, "jax", "tpu-v5p-8", steps=20, step_time_s=1.5)
    (tmp_path / "prices.yaml").write_text(PRICES)
    _register()
    argv = ["cost", "train", str(run), "--prices", str(tmp_path / "prices.yaml"), "--preemptions-per-hour", "0.5"]
    result = CliRunner().invoke(app, argv, terminal_width=400)
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "Spot / preemptible capacity" in out and "break-even preemptions/h" in out
    assert "11.4 min (worst 12.7): 100/2 steps × 1.50 s + restart 10 min + compile 12 s" in out
    assert "$5.20/h spot" in out and "3.62" in out
    assert "assumed: restart 10 min (new machine, setup, bucket pull); 0.5 preemptions/h" in out
    result = CliRunner().invoke(app, ["cost", "train", str(run)], terminal_width=400)
    assert result.exit_code == 0 and "no spot price (give --prices chips.CHIP.spot)" in " ".join(result.output.split())


def test_a_spot_price_carries_its_own_source_and_date_and_the_catalog_has_none(tmp_path):
    """Spot quotes come from other pages than the on-demand ones: a spot price keeps its own source and date, and
    the catalog, with no spot quote from the same page as its on-demand prices, gives none (hardware.py)."""
    from crosstune.hardware import CHIPS

    assert all(chip.spot_price_per_chip_hour is None for chip in CHIPS.values())
    run = read_run(write_run(tmp_path, "torch", "2xh100", steps=20, step_time_s=1.5))
    assert spot_cost(run, PriceBook()).spot is None
    (tmp_path / "prices.yaml").write_text("chips:\n  h100: {spot: 2.25, source: a spot quote, date: 2026-03}\n")
    s = spot_cost(run, load_prices(tmp_path / "prices.yaml"))
    assert s.spot.per_hour == pytest.approx(2 * 2.25) and (s.spot.source, s.spot.date) == ("a spot quote", "2026-03")
    assert s.on_demand.per_hour == pytest.approx(2 * 11.06) and s.on_demand.source != s.spot.source
