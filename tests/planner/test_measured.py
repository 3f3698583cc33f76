"""`crosstune plan --run` on the devices at hand (here: this CPU's 8 fake devices): the tiny recipe's jax step built,
filled on the devices, compiled and timed, its report beside the planner's; the options that go with --run only;
the learning rate the metrics report, computed once on the host."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.helpers.paths import RECIPES

TINY = RECIPES / "tiny-cpu.yaml"


def _invoke(*args: str):
    from crosstune.cli import _register, app

    _register()
    return CliRunner().invoke(app, ["plan", str(TINY), *args], terminal_width=200)


def test_plan_run_times_the_step_on_the_devices_it_sees(monkeypatch):
    """The report's measured side is the run's (finite losses, positive times, as many as asked); there is no
    prediction on a CPU (it has no bf16 peak), and the planner's memory for the same layers is there."""
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
    got = _invoke("--run", "--layers", "2", "--steps", "2", "--set", "data.max_seq_len=256", "--json")
    assert got.exit_code == 0, got.output
    report = json.loads(got.stdout[got.stdout.index("{") :])
    m = report["measured"]
    assert report["hardware"] == "cpu" and report["layers"] == {"measured": 2, "model": 6, "full_depth": False}
    assert len(m["step_times_s"]) == 2 and all(t > 0 for t in m["step_times_s"]) and m["micro_step_s"] > 0
    assert report["micro_batch_tokens"] == 2 * 256 and np.isfinite(m["first_loss"])
    assert m["first_loss"] == pytest.approx(np.log(1024), rel=0.01)  # a near-uniform tiny model's first loss
    assert report["predicted"]["micro_step_s"] is None and report["predicted"]["planner_gb"] > 0


def test_plan_run_says_where_the_planner_predicts_no_fit_and_lets_the_compile_decide(monkeypatch):
    """Where the planner's memory for the measured layers is over what the chip gives a program, `plan --run` says
    so before it compiles, and still runs: XLA's compile decides (the planner is an estimate: within 10 % of XLA)."""
    from crosstune.plan import driver

    def on_a_tiny_chip(*args, **kwargs):  # the CPU gives no limit: the planner's plans get one of 1 MB
        plan = planned(*args, **kwargs)
        plan.jax_memory.usable = 0.001
        return plan

    planned = driver.plan_recipe
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
    monkeypatch.setattr(driver, "plan_recipe", on_a_tiny_chip)
    scanned = ["--set", "backend.jax.scan_layers=true"]  # nothing recomputed: unrolling is one of the fixes
    got = _invoke("--run", "--layers", "2", "--steps", "1", "--set", "data.max_seq_len=128", *scanned, "--json")
    assert got.exit_code == 0, got.output
    said = "over the 0.0 a program may hold: XLA's compile decides (if it refuses: fewer --layers, or recompute"
    assert "the planner predicts" in got.output and said in got.output
    assert "or unroll the layers: backend.jax.scan_layers: false" in got.output
    assert json.loads(got.stdout[got.stdout.index("{") :])["measured"]["micro_step_s"] > 0


REFUSED = [
    (["--steps", "3"], "--steps and --profile go with --run"),
    (["--layers", "2"], "--layers goes with --compile or --run"),
    (["--run", "--compile"], "--run compiles on the chip itself"),
    (["--run", "--search"], "--search compiles by itself"),
]


@pytest.mark.parametrize(("args", "says"), REFUSED)
def test_the_run_s_options_are_refused_elsewhere(args, says):
    got = _invoke(*args)
    assert got.exit_code == 1 and says in got.output


def test_the_learning_rate_is_computed_once_on_the_host():
    """The metrics' learning rate is read from an array the schedule filled once on the host's CPU: evaluated
    eagerly per step, an optax schedule compiles a dozen scalar programs on a TPU at the first step's metrics."""
    from crosstune.recipe.schema import TrainSection
    from crosstune.train.jax.optimizer import make_optimizer, schedule_values

    _, schedule = make_optimizer(TrainSection(learning_rate=1e-3, warmup_steps=3, schedule="cosine"), 10)
    values = schedule_values(schedule, 10)
    assert isinstance(values, np.ndarray) and values.shape == (11,)
    np.testing.assert_allclose(values, [float(schedule(i)) for i in range(11)], rtol=1e-6, atol=1e-12)
    assert values[0] == 0 and values[3] == pytest.approx(1e-3) and values[10] == pytest.approx(0, abs=1e-12)


def test_a_step_xla_can_not_fit_is_the_user_s_to_act_on():
    """XLA's RESOURCE_EXHAUSTED at compile (the chip's: the 31B's 4 scanned layers without remat, 20.07 GB of
    temporaries on a 15.75 GB v5e) is a TrainError naming the step and what to change, not a bug; any other
    runtime error stays what it is."""
    import jax

    from crosstune.train.backend import TrainError
    from crosstune.train.jax.aot import compile_lowered

    class Lowered:
        def __init__(self, message: str) -> None:
            self.message = message

        def compile(self):
            raise jax.errors.JaxRuntimeError(self.message)

    oom = "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (20.07G) exceeds"
    with pytest.raises(
        TrainError, match=r"^the 31B's step at 4 layers does not fit the devices: Ran out .*\(20\.07G\)"
    ):
        compile_lowered(Lowered(oom), "the 31B's step at 4 layers")
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        compile_lowered(Lowered("INTERNAL: something else"), "a step")


def test_plan_run_s_limit_verdict_reads_xla_s_peak_and_a_record_without_one_its_total():
    """On the chip, XLA's figure against the device's bytes_limit is its peak where it reported one (a scan's total
    reads above what the chip holds: crosstune.planner.aot_report.held), else its total; both are reported."""
    import dataclasses

    from crosstune.planner import plan_recipe
    from crosstune.planner.measured import MeasuredStep, measured_report
    from crosstune.planner.planned_recipe import load_for_plan
    from crosstune.units import GB

    recipe = load_for_plan(TINY)
    plan = plan_recipe(recipe, "jax")
    record = dict(
        recipe="tiny",
        hardware="cpu",
        device_kind="cpu",
        devices=1,
        layers=6,
        model_layers=6,
        micro_batch_tokens=512,
        accumulation=1,
        build_s=1.0,
        fill_s=1.0,
        lower_s=1.0,
        compile_s=1.0,
        step_times_s=[0.1],
        median_s=0.1,
        losses=[7.0],
        peak_bytes=12 * GB,
        peak_in_use_bytes=11 * GB,
        bytes_limit=15 * GB,
        xla_argument_bytes=5 * GB,
        xla_output_bytes=0,
        xla_alias_bytes=0,
        xla_temp_bytes=11 * GB,
        xla_code_bytes=0,
        flops=1e12,
        bytes_accessed=1e10,
    )
    before = MeasuredStep.from_dict(record)  # a record without XLA's peak: its total, 16 GB, is over the limit
    old = measured_report(plan, recipe, before)
    assert not old["ran_within_limit"] and old["within_limit_by"] == "total" and old["xla_peak_gb"] is None
    now = measured_report(plan, recipe, dataclasses.replace(before, xla_peak_bytes=13 * GB))
    assert now["ran_within_limit"] and now["within_limit_by"] == "peak"
    assert now["xla_gb"] == pytest.approx(16) and now["xla_peak_gb"] == pytest.approx(13)
