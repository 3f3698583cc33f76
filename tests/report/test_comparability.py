"""What may be set side by side: sweeps of different workloads are flagged, TCO pairs a run
with the sweep of what it trained (never by position), `--context` is never silently replaced, and evaluations are
compared within one protocol — the demo's greedy and sampled passes raise no alarm, a real mismatch does."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crosstune.cost.prices import CostError, PriceBook
from crosstune.cost.tco_workload import load_workload
from crosstune.errors import InputError
from crosstune.report.inputs import ReportError
from crosstune.report.writer import write_report
from tests.helpers.report import (
    DEMO_MAX_TOKENS,
    GPU_SWEEP,
    TPU_SWEEP,
    served_by,
    write_demo_evals,
    write_eval,
    write_run,
)


def _sweep(tmp_path: Path, name: str, fixture: Path = GPU_SWEEP, **changes) -> Path:
    summary = json.loads(fixture.read_text()) | changes
    for cell in summary["cells"] if "output_len" in changes else []:
        cell["output_len"] = changes["output_len"]  # bench serve records it per cell too
    path = tmp_path / name / "summary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary))
    return path


def _md(tmp_path: Path, inputs: list[Path], **kw) -> str:
    write_report(inputs, tmp_path / "out", **kw)
    return (tmp_path / "out" / "report.md").read_text()


# --- sweeps ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "what"),
    [
        ({"output_len": 64}, "output length (tokens) — 2×H100 (vLLM, tp=2): 256; other: 64"),
        ({"api": "chat"}, "api — 2×H100 (vLLM, tp=2): completions; other: chat"),
        (
            {"tokenizer": "other/tokenizer"},
            "tokenizer — 2×H100 (vLLM, tp=2): google/gemma-4-31b-it; other: other/tokenizer",
        ),
    ],
)
def test_sweeps_of_different_workloads_are_flagged(tmp_path, change, what):
    other = _sweep(tmp_path, "other", label="other", **change)
    md = _md(tmp_path, [GPU_SWEEP, other])
    assert f"> **NOT COMPARABLE:** the sweeps differ in {what}" in md
    assert "| ⚠ median TTFT, ctx 4096, 8 concurrent (ms) |" in md  # the headline rows are red
    assert "| ⚠ 4096 | 8 |" in md  # and the compare table's


def test_a_cold_sweep_is_not_compared_with_a_cached_one(tmp_path):
    cold = _sweep(tmp_path, "cold", label="cold", prompt_cache="cold", seed=11)
    reuse = _sweep(tmp_path, "reuse", label="reuse", prompt_cache="prefix reuse 0.5", prefix_reuse=0.5, seed=12)
    md = _md(tmp_path, [cold, reuse])
    assert "> **NOT COMPARABLE:** the sweeps differ in prompt cache — cold: cold; reuse: prefix reuse 0.5" in md
    assert "prompt cache not recorded" not in _md(tmp_path / "old", [GPU_SWEEP, TPU_SWEEP])  # neither records it


def test_a_rate_sweep_is_not_compared_with_a_concurrency_sweep(tmp_path):
    summary = json.loads(GPU_SWEEP.read_text())
    for cell in summary["cells"]:
        cell["request_rate"], cell["concurrency"] = float(cell["concurrency"]), None
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps(summary | {"label": "rates"}))
    md = _md(tmp_path, [GPU_SWEEP, rates])
    assert (
        "NOT COMPARABLE:** the sweeps differ in load — 2×H100 (vLLM, tp=2): concurrent requests; rates: request rate"
        in md
    )


def test_what_is_compared_is_named_and_two_things_at_once_is_a_warning(tmp_path):
    md = _md(tmp_path, [TPU_SWEEP, GPU_SWEEP])
    assert "compared: hardware — TPU v6e-8 (vLLM TPU, tp=8): tpu-v6e-8; 2×H100 (vLLM, tp=2): 2xh100" in md
    assert "NOT COMPARABLE" not in md
    other = _sweep(tmp_path, "m", model="gemma-3-27b-it", kv_cache_dtype="fp8")
    md = _md(tmp_path, [TPU_SWEEP, other])
    assert (
        "> **Warning:** the sweeps differ in hardware and model and KV-cache dtype at once: a ratio can't be put" in md
    )
    bare = _sweep(tmp_path, "bare", label="bare", api=None, tokenizer=None)
    md = _md(tmp_path, [GPU_SWEEP, bare])
    assert "> **Warning:** api not recorded for bare: comparability unchecked" in md


# --- TCO pairing ----------------------------------------------------------------------------------------------------
@pytest.fixture
def two_runs(tmp_path):
    jax = write_run(tmp_path / "j", "jax", "tpu-v5p-8", step_time_s=1.0)
    torch = write_run(tmp_path / "t", "torch", "2xh100", step_time_s=1.6)
    return jax, torch, served_by(jax, TPU_SWEEP, tmp_path / "bench-jax"), served_by(torch, GPU_SWEEP, tmp_path / "b-t")


def _tco_options(md: str) -> list[str]:
    section = md[md.index("## Total cost of ownership") :]
    rows = [line for line in section.splitlines() if line.startswith("| ") and " → " in line]
    return [row.split(" | ")[0].removeprefix("| ") for row in rows]


def test_tco_pairs_each_run_with_the_sweep_of_what_it_trained(tmp_path, two_runs):
    jax, torch, jax_sweep, torch_sweep = two_runs
    md = _md(tmp_path, [jax, torch, torch_sweep, jax_sweep])  # the sweeps in the other order than the runs
    assert _tco_options(md) == [
        "jax · tpu-v5p-8 · tiny-jax → TPU v6e-8 (vLLM TPU, tp=8) @ ctx 8192",
        "torch · 2xh100 · tiny-torch → 2×H100 (vLLM, tp=2) @ ctx 8192",
    ]


def test_sweeps_that_name_no_run_are_not_paired_by_position(tmp_path, two_runs):
    jax, torch, _, _ = two_runs
    md = _md(tmp_path, [jax, torch, GPU_SWEEP, TPU_SWEEP])
    assert _tco_options(md) == []
    assert "2×H100 (vLLM, tp=2) does not say which run it served: pair them with --pair RUN\\_DIR=SUMMARY" in md
    assert not (tmp_path / "out" / "charts" / "tco.png").exists()
    md = _md(tmp_path, [jax, torch, GPU_SWEEP, TPU_SWEEP], pairs=[(jax, TPU_SWEEP), (torch, GPU_SWEEP)])
    assert [o.split(" → ")[0] for o in _tco_options(md)] == [
        "jax · tpu-v5p-8 · tiny-jax",
        "torch · 2xh100 · tiny-torch",
    ]
    with pytest.raises(InputError, match=r"--pair .*: the sweep declares it served .*tiny-jax, not .*tiny-torch"):
        write_report([jax, torch, two_runs[2]], tmp_path / "o2", pairs=[(torch, two_runs[2])])


def test_the_context_is_one_every_paired_sweep_measured_never_a_silent_other(tmp_path, two_runs):
    jax, torch, jax_sweep, torch_sweep = two_runs
    with pytest.raises(
        ReportError, match=r"--context 999: not measured by every sweep priced \(TPU v6e-8 .*: 1024, 2048"
    ):
        write_report([jax, torch, jax_sweep, torch_sweep], tmp_path / "out", context=999)
    assert not (tmp_path / "out").exists()
    md = _md(tmp_path, [jax, torch, jax_sweep, torch_sweep], context=2048)
    assert all(o.endswith("@ ctx 2048") for o in _tco_options(md)) and len(_tco_options(md)) == 2
    summary = json.loads(torch_sweep.read_text())
    summary["cells"] = [c for c in summary["cells"] if c["context_len"] != 8192]  # the GPU sweep stops at 4096
    torch_sweep.write_text(json.dumps(summary))
    md = _md(tmp_path, [jax, torch, jax_sweep, torch_sweep])
    assert all(o.endswith("@ ctx 4096") for o in _tco_options(md))  # the largest both measured, not each one's own


def test_a_workload_option_with_another_runs_sweep_is_refused(tmp_path, two_runs):
    jax, torch, jax_sweep, _ = two_runs
    path = tmp_path / "w.yaml"
    path.write_text(
        f"days: 30\nserve_tokens_per_day: 1000000\noptions:\n  o:\n    train: {{run: {torch}}}\n"
        f"    serve: {{bench: {jax_sweep}}}\n"
    )
    with pytest.raises(
        CostError, match=r"options.o: serve.bench declares it served .*tiny-jax, but train is .*tiny-torch"
    ):
        load_workload(path, PriceBook())


def test_cli_pair_option(tmp_path, two_runs):
    from crosstune.cli import _register, app

    _register()
    jax, torch, _, _ = two_runs
    out = tmp_path / "out"
    args = ["report", str(jax), str(torch), str(GPU_SWEEP), str(TPU_SWEEP), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--pair", f"{torch}={GPU_SWEEP}", "--pair", f"{jax}={TPU_SWEEP}"])
    assert result.exit_code == 0, result.output
    assert len(_tco_options((out / "report.md").read_text())) == 2
    result = CliRunner().invoke(app, [*args, "--pair", f"{torch}"])
    assert result.exit_code == 1 and "--pair" in result.output and "expected RUN_DIR=SUMMARY" in result.output


# --- evaluations ----------------------------------------------------------------------------------------------------
DEMO_GREEDY = {"base": "S" * 30 + "R" * 30, "torch-lora": "." * 26 + "R" * 34, "jax-lora": "." * 25 + "R" * 35}
DEMO_SAMPLED = {"base": "R" * 40, "torch-lora": ".." + "R" * 38, "jax-lora": "." * 10 + "R" * 30}


def test_the_demos_evaluations_raise_no_false_alarm(tmp_path):
    """Greedy pass@1 on 60 problems and 5 samples at T=0.8 on 8 of them, for three models (as the demo once
    evaluated): two protocols, each compared across the models; the demo's report once flagged it all NOT
    COMPARABLE."""
    runs = [write_run(tmp_path / "runs", b, "cpu") for b in ("torch", "jax")]
    evals = sorted(write_demo_evals(tmp_path, DEMO_GREEDY, DEMO_SAMPLED))
    html = write_report([*runs, *evals], tmp_path / "report")
    md, page = (tmp_path / "report" / "report.md").read_text(), html.read_text()
    assert "NOT COMPARABLE" not in md and "NOT COMPARABLE" not in page and 'class="flagged"' not in page
    assert "**pass@k — 60 problems × 1 sample each, greedy, strict verdict**" in md
    assert "**pass@k — 8 problems × 5 samples each, T=0.8, top\\_p=0.95, strict verdict**" in md
    models = str(tmp_path / "models").replace("_", "\\_")  # report.md escapes Markdown
    assert f"| torch-lora-greedy | {models}/torch-lora | 60 | 43.3 % |" in md  # 26 / 60
    assert f"| jax-lora-sampled | {models}/jax-lora | 40 | 25.0 % | 25.0 % |" in md  # 10 / 40 = 2 problems all five


def test_a_real_evaluation_mismatch_is_flagged(tmp_path):
    """Two models evaluated in two ways that share nothing: the difference is named and their rows are red."""
    evals = write_demo_evals(tmp_path, {"base": "R" * 60}, {"base": "R" * 40})
    other = write_demo_evals(tmp_path / "o", {"tuned": "." * 60}, {"tuned": "." * 40})
    for folder in other:
        summary = json.loads((folder / "summary.json").read_text())
        summary["sampling"]["max_tokens"] = 1024  # every evaluation of the tuned model allowed longer answers
        (folder / "summary.json").write_text(json.dumps(summary))
    md = _md(tmp_path, [*evals, *other])
    assert (
        "> **NOT COMPARABLE:** the evaluations of base-greedy and tuned-greedy differ in max tokens: "
        f"{DEMO_MAX_TOKENS} vs 1024" in md  # the demo's evaluations (write_demo_evals) against the tuned model's
    )
    assert "| ⚠ base-greedy |" in md and "| ⚠ tuned-greedy |" in md


def test_failed_samples_are_a_warning_and_an_eval_alone_is_no_mismatch(tmp_path):
    e1 = write_eval(tmp_path / "e1", {"p1": "....R", "p2": "RRRRR"})
    summary = json.loads((e1 / "summary.json").read_text())
    summary["per_problem"][0]["failed"] = 2
    (e1 / "summary.json").write_text(json.dumps(summary))
    md = _md(tmp_path, [e1])
    assert "> **Warning:** e1: 2 of 12 samples failed to generate; its pass@k is over the completed samples" in md
    assert "NOT COMPARABLE" not in md
