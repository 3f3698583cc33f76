"""Numbers that mean what they say, and clean errors: NaN, infinite, negative, absurd
and mistyped values are refused where they enter cost and report — prices, metrics rows, run.json, a run's
recipe.yaml, sweeps, evaluations, workload files and options — with the file and field named, in one line."""

import json
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crosstune.cost.costs import what_if_serving, what_if_training
from crosstune.cost.prices import PriceBook
from crosstune.cost.source_study import seed_options
from crosstune.cost.tco import Option, Workload, break_even
from crosstune.errors import CrosstuneError, InputError
from crosstune.run.run_summary import read_run
from crosstune.servebench.summary_cells import read_sweep
from tests.helpers.report import GPU_SWEEP, TPU_SWEEP, write_eval, write_run
from tests.helpers.serve import bench_args, cli, one_line_error


def _cli(*args: str):
    from crosstune.cli import _register, app

    _register()
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output  # no traceback
    return " ".join(result.output.split())


# --- prices ---------------------------------------------------------------------------------------------------------
def test_no_price_prints_as_nan():
    book = PriceBook().with_target_price("cpu", math.nan, "typo")
    with pytest.raises(InputError, match=r"price of cpu \(typo\): nan is not a finite number > 0"):
        book.price("cpu")


# --- run directories ------------------------------------------------------------------------------------------------
def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _write_rows(run: Path, rows: list[dict]) -> None:
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"step_time_s": "1.5"}, r"metrics.jsonl:3: step_time_s is '1.5': input should be a valid number"),
        ({"step_time_s": math.nan}, r"metrics.jsonl:3: step_time_s is nan: input should be a finite number"),
        ({"step_time_s": -1.0}, r"metrics.jsonl:3: step_time_s is -1.0: input should be greater than or equal to 0"),
        ({"tokens": "1000"}, r"metrics.jsonl:3: tokens is '1000': input should be a valid integer"),
        ({"trained_tokens": 2.5}, r"metrics.jsonl:3: trained_tokens is 2.5: input should be a valid integer"),
        ({"trained_tokens": -1}, r"metrics.jsonl:3: trained_tokens is -1: input should be greater than or equal to 0"),
        ({"loss": "low"}, r"metrics.jsonl:3: loss is 'low': input should be a valid number"),
        ({"loss": math.nan}, r"metrics.jsonl:3: loss is nan: a cross-entropy is a finite number >= 0"),
        ({"loss": math.inf}, r"metrics.jsonl:3: loss is inf: a cross-entropy is a finite number >= 0"),
        ({"step_time_s": 0.0}, r"metrics.jsonl:3: step_time_s is 0: no optimizer step takes no time"),
        ({"trained_tokens": 5000}, r"metrics.jsonl:3: trained_tokens 5000 > tokens 1000"),
        ({"mfu": 3.0}, r"metrics.jsonl:3: mfu is 3.0: a utilisation is a fraction in \[0, 1\]"),
        ({"step": 1}, r"metrics.jsonl:3: step 1 does not follow step 2: rows out of order or repeated"),
    ],
)
def test_a_metrics_row_that_would_make_a_cost_lie_is_refused(tmp_path, change, message):
    run = write_run(tmp_path, "torch", "2xh100")
    rows = _rows(run)
    rows[2].update(change)
    _write_rows(run, rows)
    with pytest.raises(CrosstuneError, match=message):
        read_run(run)
    assert message.split(": ", 1)[1].split("\\")[0][:20] in _cli("cost", "train", str(run))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"compile_time_s": "12"}, "run.json: compile_time_s: input should be a valid number (got '12')"),
        ({"checkpoint_time_s": -3.0}, "run.json: checkpoint_time_s: input should be greater than or equal to 0"),
        ({"steps": 2.5}, "run.json: steps: input should be a valid integer (got 2.5)"),
        ({"hardware": 8}, "run.json: hardware: input should be a valid string (got 8)"),
        ({"lora": {"rank": "8", "alpha": 16}}, "run.json: lora.rank: input should be a valid integer (got '8')"),
        ({"global_batch": 0}, "run.json: global_batch: input should be greater than 0 (got 0)"),
    ],
)
def test_a_mistyped_run_json_field_is_one_line_naming_it(tmp_path, change, message):
    run = write_run(tmp_path, "jax", "tpu-v5p-8")
    meta = json.loads((run / "run.json").read_text()) | change
    (run / "run.json").write_text(json.dumps(meta))
    assert message in _cli("cost", "train", str(run))
    assert message in _cli("report", str(run), "--out", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: [unclosed\n", "recipe.yaml: not valid YAML: expected ',' or ']'"),
        ("- a list\n", "recipe.yaml: not a YAML mapping"),
        (None, "recipe.yaml: train.per_device_batch_size: Input should be a valid integer"),
        ("", None),  # an empty recipe.yaml: the run has none (prices come from the catalog)
    ],
)
def test_a_corrupt_recipe_yaml_in_a_run_is_one_line(tmp_path, text, message):
    run = write_run(tmp_path, "torch", "2xh100")
    recipe = run / "recipe.yaml"
    recipe.write_text(
        recipe.read_text().replace("per_device_batch_size: 2", "per_device_batch_size: '2'") if text is None else text
    )
    if message is None:
        assert read_run(run).recipe is None
        return
    shown = _cli("cost", "train", str(run))
    assert f"{recipe}:" in shown and message.split(": ", 1)[1] in shown and "restore it from a backup" in shown


# --- sweeps and evaluations -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"output_throughput": math.inf}, r"cells\[0\].output_throughput: inf is not a finite number >= 0"),
        ({"output_throughput": "fast"}, r"cells\[0\].output_throughput: 'fast' is not a number >= 0"),
        ({"output_throughput": -5.0}, r"cells\[0\].output_throughput: -5.0 is not a number >= 0"),
        ({"p99_ttft_ms": math.nan}, r"cells\[0\].p99_ttft_ms: nan is not a finite number >= 0 \(ms\)"),
        ({"concurrency": 0}, r"cells\[0\].concurrency: 0 is not a whole number >= 1"),
        ({"completed": 1.5}, r"cells\[0\].completed: 1.5 is not a whole number >= 0"),
        ({"context_len": "4k"}, r"cells\[0\].context_len: '4k' is not a whole number >= 1"),
    ],
)
def test_a_sweep_figure_that_is_not_a_plausible_number_is_refused(tmp_path, change, message):
    summary = json.loads(GPU_SWEEP.read_text())
    summary["cells"][0].update(change)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    with pytest.raises(InputError, match=message):
        read_sweep(path)
    assert message.replace("\\", "").split(": ", 1)[1][:18] in _cli("cost", "serve", str(path))


def test_an_evaluation_figure_out_of_range_is_refused(tmp_path):
    folder = write_eval(tmp_path / "e", {"p1": "....R"})
    summary = json.loads((folder / "summary.json").read_text())
    for change, message in (
        ({"pass_at_k": {"1": 1.5}}, "pass_at_k.1 is 1.5, not a pass rate in [0, 1]"),
        ({"samples": "5"}, "samples is '5', not a whole number >= 0"),
        ({"sampling": {"temperature": math.nan}}, "sampling.temperature is nan, not a finite number >= 0"),
    ):
        (folder / "summary.json").write_text(json.dumps(summary | change))
        assert message in _cli("report", str(folder), "--out", str(tmp_path / "out"))


# --- workloads and options ------------------------------------------------------------------------------------------
WORKLOAD = f"""days: 30
serve_tokens_per_day: 10000000
options:
  assumed:
    train: {{target: 2xh100, tokens: 9.2e6, tokens_per_s: 486}}
    serve: {{target: 2xh100, output_tokens_per_s: 800}}
  fixture:
    train: {{target: tpu-v5p-8, tokens: 9.2e6, hours: 3.34}}
    serve: {{bench: {TPU_SWEEP}}}
"""


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("days: 30", "days: '30'", "days: '30' is not a number >= 0 and <= 3653"),
        ("days: 30", "days: 100000", "days: 100000 is not a number >= 0 and <= 3653 (days of serving, at most ten"),
        (
            "serve_tokens_per_day: 10000000",
            "serve_tokens_per_day: -5",
            "serve_tokens_per_day: -5.0 is not a number >= 0",
        ),
        (
            "serve_tokens_per_day: 10000000",
            "serve_hours_per_day: 25",
            "serve_hours_per_day: 25.0 is not a number >= 0 and <= 24",
        ),
        (
            "output_tokens_per_s: 800",
            "output_tokens_per_s: .inf",
            "output_tokens_per_s: inf is not a finite number > 0",
        ),
        ("tokens_per_s: 486", "tokens_per_s: -486", "tokens_per_s: -486 is not a number > 0"),
        ("tokens: 9.2e6, tokens_per_s", "tokens: '9.2e6', tokens_per_s", "tokens: '9.2e6' is not a number > 0"),
        ("hours: 3.34", "hours: .nan", "hours: nan is not a finite number > 0"),
        ("days: 30", "days: 30\ncontext: 4096.0", "context: 4096.0 is not a whole number >= 1"),
        ("days: 30", "days: 30\nslo: {p99_ttft_ms: -100}", "slo p99_ttft_ms=-100: an SLO must be a positive, finite"),
        ("days: 30", "days: 30\nslo: {p99_ttft_ms: '5'}", "slo p99_ttft_ms='5': '5' is not a number of milliseconds"),
        ("days: 30", "days: 30\ndayz: 4", "unknown key(s) 'dayz'"),
        ("hours: 3.34", "hours: 3.34, hourz: 2", "options.fixture.train: unknown key(s) 'hourz'"),
        ("days: 30", "days: 30\ndays: 31", ":2: not valid YAML: duplicate key 'days' (first on line 1)"),
    ],
)
def test_a_workload_figure_that_is_not_a_plausible_number_is_one_line(tmp_path, old, new, message):
    path = tmp_path / "workload.yaml"
    path.write_text(WORKLOAD.replace(old, new, 1))
    assert message in _cli("cost", "tco", str(path))


def test_options_on_the_command_line_are_checked_too(tmp_path):
    path = tmp_path / "workload.yaml"
    path.write_text(WORKLOAD)
    assert "--tokens-per-day: -1.0 is not a number >= 0" in _cli("cost", "tco", str(path), "--tokens-per-day", "-1")
    assert "--days: nan is not a finite number" in _cli("cost", "tco", str(path), "--days", "nan")
    what_if = ["cost", "what-if", "--target", "2xh100", "--tokens"]
    assert "--tokens-per-s: inf is not a finite number > 0" in _cli(*what_if, "9.2e6", "--tokens-per-s", "inf")
    assert "--tokens: -1.0 is not a number > 0" in _cli(*what_if, "-1", "--tokens-per-s", "5")
    run = write_run(tmp_path, "torch", "2xh100")
    out = str(tmp_path / "out")
    assert "--days: -3.0 is not a number >= 0" in _cli("report", str(run), "--out", out, "--days", "-3")
    assert "--context: 0 is not a whole number >= 1" in _cli("report", str(run), "--out", out, "--context", "0")
    with pytest.raises(InputError, match=r"an assumed output throughput: inf is not a finite number > 0"):
        what_if_serving(PriceBook(), "2xh100", 4096, math.inf)
    with pytest.raises(InputError, match=r"trained tokens/s: nan is not a finite number > 0"):
        what_if_training(PriceBook(), "2xh100", trained_tokens=1e6, tokens_per_s=math.nan)


def test_a_break_even_beyond_ten_years_is_not_a_day_number():
    from dataclasses import replace

    tpu, gpu = seed_options()
    a = Option("A", tpu.train, gpu.serve)  # cheaper to train, serves at $22.12 an hour
    cheaper = replace(gpu.serve, price=replace(gpu.serve.price, per_hour=22.12 - 1e-6))
    be = break_even(a, Option("B", gpu.train, cheaper), Workload(days=30, serve_hours_per_day=1.0))
    # (119.23 − 56.11) / 1e-6 days ≈ 173,000 years: once printed as "A is cheaper until day 63,114,...,  B after"
    assert be.days is None and be.message.startswith("A is cheaper for the next 10 years: the totals cross only after")
    assert not re.search(r"day [\d,]+", be.message)


# --- one SLO spelling (servebench.slo parses it: tests/servebench/test_bench_numbers.py) ------------------------------
def test_a_negative_slo_is_refused_by_the_commands_in_bench_s_words(tmp_path, tiny_gemma4_dir):
    said = "--slo 'p99_ttft_ms=-1': an SLO must be a positive, finite number of milliseconds"
    assert said in _cli("cost", "serve", str(GPU_SWEEP), "--slo", "p99_ttft_ms=-1")
    assert said in _cli("report", str(GPU_SWEEP), "--out", str(tmp_path / "r"), "--slo", "p99_ttft_ms=-1")
    line = one_line_error(cli(*bench_args("http://127.0.0.1:9", tiny_gemma4_dir, "--slo", "p99_ttft_ms=-1")))
    assert line == f"error: {said}"


def test_a_recipe_name_in_run_json_never_leads_outside_the_runs_folder(tmp_path):
    """Without recipe.yaml the report looks for the prepared data at <runs>/../data/<recipe_name>: a name that is not
    one path component (run.json is the user's file) is not followed."""
    from crosstune.report.comparability import prepared_manifest

    run = write_run(tmp_path / "work" / "runs", "torch", "cpu")
    (run / "recipe.yaml").unlink()
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "manifest.json").write_text(json.dumps({"data_hash": "s" * 64}))
    meta = json.loads((run / "run.json").read_text())
    meta["data"]["prepared_dir"] = str(tmp_path / "moved")  # the folder run.json names is gone
    (run / "run.json").write_text(json.dumps(meta))
    assert prepared_manifest(read_run(run))["data_hash"] == "d" * 64  # <runs>/data/tiny, the helper's layout
    (run / "run.json").write_text(json.dumps(meta | {"recipe_name": "../../../secret"}))
    assert prepared_manifest(read_run(run)) == {}


def test_a_resumed_run_reads_with_its_rows_in_order(tmp_path):
    """A resumed run's metrics.jsonl keeps the rows up to its checkpoint (crosstune.run.metrics.MetricsWriter):
    steps 1…20 with resumed_from_step 10 are in order."""
    run = write_run(tmp_path, "jax", "tpu-v5p-8")
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(meta | {"resumed_from_step": 10}))
    assert read_run(run).steps == 20
