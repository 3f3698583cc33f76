"""End-to-end judging with iverilog: references pass, known-wrong designs get the right category."""

from __future__ import annotations

import json
import shutil

import pytest

from crosstune.evals import evaluate as evaluate_module
from crosstune.evals.evaluate import evaluate_completions, measure_references
from crosstune.evals.judge.sandbox import Limits
from crosstune.evals.problems.problem_sets import CODE_COMPLETE, load_problems
from tests.helpers.paths import FIXTURES

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs iverilog (make setup)")

CHECKOUT = FIXTURES / "verilogeval"
FAST = ["Prob001_zero", "Prob002_and2", "Prob003_dff8r"]


def fenced(code: str) -> str:
    return f"Here is the design.\n```verilog\n{code}\n```\n"


def test_fixture_references_pass_in_both_tasks(tmp_path):
    for task in ("spec-to-rtl", CODE_COMPLETE):
        problems = load_problems(CHECKOUT, task, FAST)
        report = evaluate_completions(problems, None, tmp_path / task, workers=2)
        assert report.summary["pass_at_k"] == {"1": 1.0}, report.summary["per_problem"]
        assert [r["samples"] for r in report.records] == [75, 107, 418]  # each reference's own N


def test_known_wrong_designs_get_their_category(tmp_path):
    problems = load_problems(CHECKOUT, patterns=["Prob002_and2", "Prob003_dff8r"])
    and2 = "module TopModule(input a, input b, output out);\n  assign out = {body};\nendmodule"
    dff = "module TopModule(input clk, input [7:0] d, input reset, output reg [7:0] q);\n{body}\nendmodule"
    completions = {
        "Prob002_and2": [
            fenced(and2.format(body="a & b")),  # correct
            fenced(and2.format(body="a | b")),  # wrong function
            fenced(and2.format(body="a & b") + "\n)"),  # trailing garbage
            fenced("module TopModule(input a, input b, output out);\n  Adder u(a, b, out);\nendmodule"),
            fenced("module TopModule(input a, input b, output out);\n  always @* out = a & b;\nendmodule"),
            fenced(
                "module TopModule(input a, input b, output out);\n  assign out = a & b;\n"
                "  always @(a) while (a) ;\nendmodule"
            ),  # hangs at time 0 of the first a=1
        ],
        "Prob003_dff8r": [
            fenced(dff.format(body="  always @(posedge clk)\n    if (reset) q <= 0; else q <= d;")),
            fenced(dff.format(body="  always @(posedge clk, posedge reset)\n    if (reset) q <= 0; else q <= d;")),
            fenced(dff.format(body="  always @(posedge clk) q <= d;")),
            fenced(dff.format(body="  always @(posedge clk) q <= 0'b0;")),
            fenced(
                dff.format(
                    body="  always @(posedge clk) q <= d;\n  integer i;\n"
                    "  initial begin i = 0; while (1) i = i + 1; end"
                )
            ),
            "I am not sure how to do this.",
        ],
    }
    report = evaluate_completions(problems, completions, tmp_path, ks=(1, 5), workers=2, limits=Limits(timeout_s=3))
    codes = {row["problem"]: row["codes"] for row in report.summary["per_problem"]}
    assert codes == {"Prob002_and2": ".RSmwT", "Prob003_dff8r": ".rR0TS"}
    walls = [r["wall_s"] for r in report.records]
    assert max(walls) < 3 + 1.0  # the hung samples ended within their time bound
    by_detail = [r for r in report.records if r["problem"] == "Prob003_dff8r"][1]
    assert by_detail["mismatches"] > 0 and by_detail["samples"] == 418
    assert report.summary["pass_at_k"] == {"1": pytest.approx(1 / 6), "5": pytest.approx(1 - 1 / 6)}


def test_code_complete_body_gets_the_interface(tmp_path):
    problems = load_problems(CHECKOUT, CODE_COMPLETE, ["Prob003_dff8r"])
    body = "  always @(posedge clk)\n    if (reset) q <= 0;\n    else q <= d;\nendmodule"
    report = evaluate_completions(problems, {"Prob003_dff8r": [fenced(body)]}, tmp_path, workers=1)
    assert report.records[0]["interface_prepended"] and report.records[0]["verdict"] == "."


def test_upstream_compatible_mode_reproduces_the_testbench_timeout_failure(tmp_path):
    """Upstream's documented behaviour: a reference whose stimulus outlasts the testbench's own TIMEOUT
    never passes its rule; the strict rule passes it (N matches the reference's, cut at the same time)."""
    problems = load_problems(CHECKOUT, patterns=["Prob004_longcount"])
    upstream = evaluate_completions(problems, None, tmp_path / "u", upstream_compatible=True, workers=1)
    assert upstream.summary["per_problem"][0]["codes"] == "T"
    assert upstream.summary["strict_pass_at_1"] == 1.0
    assert upstream.records[0]["samples"] == 200000


def test_reference_counts_are_cached_by_content(tmp_path, monkeypatch):
    problems = load_problems(CHECKOUT, patterns=FAST[:2])
    counts = tmp_path / "reference_counts.json"
    first = measure_references(problems, Limits(), 2, counts)
    assert {name: o.samples for name, o in first.items()} == {"Prob001_zero": 75, "Prob002_and2": 107}
    jobs_seen = []
    original = evaluate_module._run_parallel
    monkeypatch.setattr(
        evaluate_module, "_run_parallel", lambda jobs, *a: jobs_seen.append(len(jobs)) or original(jobs, *a)
    )
    measure_references(problems, Limits(), 2, counts)
    assert jobs_seen == [0]
    assert len(json.loads(counts.read_text())) == 2


def test_broken_reference_marks_its_samples_B(tmp_path):
    folder = tmp_path / "set"
    shutil.copytree(CHECKOUT / "dataset_spec-to-rtl", folder)
    (folder / "Prob002_and2_ref.sv").write_text(
        "module RefModule(input a, input b, output out);\nassign out = a &;\nendmodule\n"
    )
    problems = load_problems(folder, patterns=["Prob002_and2"])
    report = evaluate_completions(
        problems, {"Prob002_and2": ["```verilog\nmodule TopModule;\nendmodule\n```"]}, tmp_path / "out", workers=1
    )
    assert report.records[0]["verdict"] == "B" and report.summary["references_passing"] == 0


def test_synthetic_problem_set_references_pass(tmp_path):
    synth = pytest.importorskip("crosstune.synth")
    corpus = synth.generate_corpus(tmp_path / "corpus", 0, 16, 7)
    problems = load_problems(corpus.eval_dir)
    report = evaluate_completions(problems, None, tmp_path / "out", workers=2)
    assert report.summary["pass_at_k"]["1"] == 1.0, [r for r in report.records if r["verdict"] != "."][:2]


def test_reference_stopped_by_a_limit_is_not_cached(tmp_path):
    """A reference that ran out of time once (a busy machine) is measured again by the next run into the same
    --out, instead of leaving every sample of its problem judged B for good."""
    folder = tmp_path / "set"
    shutil.copytree(CHECKOUT / "dataset_spec-to-rtl", folder)
    (folder / "Prob002_and2_ref.sv").write_text(  # ~0.5 s of CPU at time 0: over 0.2 s, well under 30 s
        "module RefModule(input a, input b, output out);\n  integer i;\n"
        "  initial for (i = 0; i < 2000000; i = i + 1) ;\n  assign out = a & b;\nendmodule\n"
    )
    problems = load_problems(folder, patterns=["Prob002_and2"])
    right = {
        "Prob002_and2": [fenced("module TopModule(input a, input b, output out);\n  assign out = a & b;\nendmodule")]
    }
    out, counts = tmp_path / "out", tmp_path / "out" / "reference_counts.json"
    starved = evaluate_completions(problems, right, out, workers=1, limits=Limits(timeout_s=0.2))
    assert starved.records[0]["verdict"] == "B" and "wall time budget" in starved.records[0]["detail"]
    assert json.loads(counts.read_text()) == {}  # the limit outcome was not stored
    again = evaluate_completions(problems, right, out, workers=1)
    assert again.records[0]["verdict"] == "." and again.summary["references_passing"] == 1
    assert [entry["samples"] for entry in json.loads(counts.read_text()).values()] == [107]


def test_limit_outcomes_in_an_older_reference_cache_are_measured_again(tmp_path):
    problems = load_problems(CHECKOUT, patterns=["Prob002_and2"])
    counts = tmp_path / "reference_counts.json"
    poisoned = {
        "strict": "T",
        "upstream": "T",
        "detail": "simulation: wall time budget exhausted",
        "mismatches": None,
        "samples": None,
        "wall_s": 30.0,
        "log": "",
        "landlocked": True,
    }
    counts.write_text(json.dumps({evaluate_module._reference_key(problems[0]): poisoned}))  # as earlier versions wrote
    measured = measure_references(problems, Limits(), 1, counts)["Prob002_and2"]
    assert (measured.strict, measured.samples, measured.limit) == (".", 107, None)
