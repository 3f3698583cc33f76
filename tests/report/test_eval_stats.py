"""The report's evaluation section: pass@k with its interval, the engine and protocol of each evaluation, a flag when
they differ, and the significance of the difference between two evaluations of the same problems."""

from __future__ import annotations

from crosstune.evals.problems.protocols import protocol_record
from crosstune.report.writer import write_report
from tests.helpers.report import write_eval

LOCAL = {"name": "transformers 5.12.1", "kind": "local"}
GREEDY = protocol_record(
    None,
    "verilogeval",
    {"n": 1, "k": [1], "temperature": 0.0, "top_p": 0.95, "max_tokens": 128, "prompt_style": "codev", "shots": 0},
)
# 10 problems, greedy: A passes 8, B passes 2, and the 6 they disagree on all favour A (exact McNemar p = 2/64)
A_CODES = {f"p{i}": "." if i < 8 else "R" for i in range(10)}
B_CODES = {f"p{i}": "." if i >= 6 and i < 8 else "R" for i in range(10)}


def report(tmp_path, extra_a: dict, extra_b: dict) -> str:
    a = write_eval(tmp_path / "model-a", A_CODES, ks=(1,), extra=extra_a)
    b = write_eval(tmp_path / "model-b", B_CODES, ks=(1,), extra=extra_b)
    write_report([a, b], tmp_path / "out")
    return (tmp_path / "out" / "report.md").read_text()


def test_intervals_and_the_paired_test_next_to_each_other(tmp_path):
    md = report(tmp_path, {"engine": LOCAL, "protocol": GREEDY}, {"engine": LOCAL, "protocol": GREEDY})
    assert "**pass@k with 95 % intervals, engine and protocol**" in md
    # report.md escapes Markdown's brackets (crosstune.report.document)
    assert "| model-a | transformers 5.12.1 | custom: n 1, k \\[1\\], temperature 0.0" in md
    assert "_\\[low, high\\]: 95 % interval, percentile bootstrap over problems (10,000 resamples, seed 0)_" in md
    # pass@1 80 % vs 20 %, 6 of 10 problems differ, p = 2/64 = 0.03125 by enumeration
    row = next(line for line in md.splitlines() if line.startswith("| model-a vs model-b |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "pass@1" and cells[2].startswith("80.0 % \\[") and cells[3].startswith("20.0 % \\[")
    assert cells[4:] == ["+60.0 pts", "6 of 10", "0.0312 (exact)", "significant at 0.05"]
    assert "model-a, model-b: one engine, transformers 5.12.1." in md
    assert "NOT COMPARABLE" not in md


def test_different_engines_are_flagged_and_not_tested(tmp_path):
    vllm = {"name": "vllm 0.11.0", "kind": "endpoint"}
    md = report(tmp_path, {"engine": LOCAL, "protocol": GREEDY}, {"engine": vllm, "protocol": GREEDY})
    assert (
        "NOT COMPARABLE:** the evaluations on the same problems were produced by different engines — model-a: "
        "transformers 5.12.1; model-b: vllm 0.11.0"
    ) in md
    assert "| ⚠ model-a |" in md and "Is the difference significant?" not in md


def test_different_protocols_are_flagged(tmp_path):
    sampled = protocol_record("codev-r1", "verilogeval", {**GREEDY["settings"], "temperature": 1.0, "top_p": 1.0})
    md = report(tmp_path, {"engine": LOCAL, "protocol": GREEDY}, {"engine": LOCAL, "protocol": sampled})
    assert "produced by different protocols — model-a: custom: n 1" in md
    assert "model-b: codev-r1 (departs from the preset): n 1" in md


def test_unrecorded_engine_and_protocol_are_a_warning(tmp_path):
    md = report(tmp_path, {}, {})
    assert "> **Warning:** model-a, model-b: engine not recorded, comparability unchecked" in md
    assert "| model-a vs model-b | pass@1 |" in md  # the same problems still get their paired test
