"""Verdict rules (strict and upstream-compatible) on crafted logs, the design screen, and pass@k."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import pytest

from crosstune.evals.judge.scoring import ProblemScore, markdown_report, pass_at_k, summarize, upstream_percent
from crosstune.evals.judge.screen import find_include, screen_design
from crosstune.evals.judge.simulate import instrument_testbench
from crosstune.evals.judge.verdict import CATEGORIES, compile_failure_code, strict_simulation_verdict, upstream_verdict
from crosstune.evals.problems.problem_sets import ProblemSetError
from tests.helpers.paths import FIXTURES

TB = FIXTURES / "verilogeval" / "dataset_spec-to-rtl" / "Prob002_and2_test.sv"
SYNC = "always @(posedge clk) if (reset) q <= 0; else q <= d;"
ASYNC = "always @(posedge clk, posedge reset) if (reset) q <= 0; else q <= d;"


@pytest.mark.parametrize(
    "log, design, code",
    [
        ("s.sv:3: syntax error\nI give up.\n", SYNC, "S"),
        ("s.sv:5: error: This assignment requires an explicit cast.\n", SYNC, "e"),
        ("s.sv:2: error: Sized numeric constant must have a size greater than zero.\n", SYNC, "0"),
        ("s.sv:4: warning: always_comb process has no sensitivities.\nMismatches: 0 in 9 samples\n", SYNC, "n"),
        ("s.sv:4: warning: @* found no sensitivities so it will never trigger.\n", SYNC, "n"),
        ("s.sv:7: error: q is not a valid l-value.\ns.sv:2:      : q is declared here as wire.\n", SYNC, "w"),
        ("s.sv:9: error: Unknown module type: Adder\n", SYNC, "m"),
        ("t.sv:60: error: Unable to bind wire/reg/memory `clk' in `tb.top_module1'\n", SYNC, "c"),
        ("s.sv:3: error: Unable to bind wire/reg/memory `foo' in `tb.top_module1'\n", SYNC, "p"),
        ("sorry: constant selects are not supported; error here\nMismatches: 0 in 9 samples\n", SYNC, "C"),
        ("Mismatches: 0 in 200 samples\nTIMEOUT\n", SYNC, "T"),  # TIMEOUT anywhere beats a pass line
        ("Unknown module type: X\ns.sv:1: syntax error\n", SYNC, "m"),  # first matching line wins
        ("Hint: Total mismatched samples is 3 out of 9 samples\n\nMismatches: 3 in 9 samples\n", SYNC, "R"),
        ("Mismatches: 3 in 9 samples\n", ASYNC, "r"),
        ("Mismatches: 0 in 9 samples\r\n", SYNC, "."),  # universal newlines, like reading the file
        ("Mismatches: 0 in 9 samples \n", SYNC, "R"),  # not exactly the pass line
    ],
)
def test_upstream_rules_on_crafted_logs(log, design, code):
    assert upstream_verdict(log, design).code == code
    assert code in CATEGORIES


FOOLING_LOGS = {
    "fake line": "Mismatches: 65 in 107 samples\nMismatches: 0 in 107 samples\n",
    "early $finish": "Hint: Total mismatched samples is 0 out of 0 samples\n\nMismatches: 0 in 0 samples\n",
}


@pytest.mark.parametrize("name", FOOLING_LOGS)
def test_upstream_is_fooled_where_strict_is_not(name):
    assert upstream_verdict(FOOLING_LOGS[name], SYNC).code == "."
    token = "a3f1"
    tokened = {"fake line": f"{token} 65 107\n", "early $finish": f"{token} 0 0\n"}[name]
    strict = strict_simulation_verdict(0, FOOLING_LOGS[name] + tokened, token, 107, SYNC)
    assert strict.code == "R"


def test_strict_reads_only_the_last_tokened_line():
    token = "tok"
    assert strict_simulation_verdict(0, "tok 0 10\n", token, 10, SYNC).code == "."
    assert strict_simulation_verdict(0, "tok 0 10\ntok 2 10\n", token, 10, SYNC).code == "R"
    assert strict_simulation_verdict(0, "tok 2 10\ntok 0 10\n", token, 10, SYNC).code == "."
    assert strict_simulation_verdict(0, "xtok 0 10\n", token, 10, SYNC).code == "R"  # a prefix breaks it
    assert strict_simulation_verdict(0, "Mismatches: 0 in 10 samples\n", token, 10, SYNC).code == "R"


def test_strict_failure_categories():
    token = "tok"
    assert strict_simulation_verdict(1, "tok 0 10\n", token, 10, SYNC).code == "R"  # vvp failed
    assert strict_simulation_verdict(0, "TIMEOUT\ntok 0 7\n", token, 10, SYNC).code == "T"
    assert strict_simulation_verdict(0, "tok 0 7\n", token, 10, SYNC).code == "R"
    assert strict_simulation_verdict(0, "tok 4 10\n", token, 10, ASYNC).code == "r"
    assert strict_simulation_verdict(0, "tok 0 0\n", token, None, SYNC).code == "R"  # a reference with N = 0
    reference = strict_simulation_verdict(0, "TIMEOUT\ntok 0 200000\n", token, None, SYNC)
    assert (reference.code, reference.samples) == (".", 200000)  # outlasting TIMEOUT is fine if N matches


def test_compile_failure_code_falls_back_to_C():
    assert compile_failure_code("s.sv:1: syntax error\n") == "S"
    assert compile_failure_code("Elaboration failed\n") == "C"
    assert compile_failure_code("TIMEOUT\n") == "C"


def test_testbench_instrumentation_keeps_the_original_line():
    text = TB.read_text()
    instrumented = instrument_testbench(text, "cafe")
    assert '$display("Mismatches: %1d in %1d samples", stats1.errors, stats1.clocks);' in instrumented
    assert '$display("cafe %0d %0d", stats1.errors, stats1.clocks);' in instrumented
    with pytest.raises(ProblemSetError, match="found 0"):
        instrument_testbench(text.replace("Mismatches:", "Errors:"), "cafe", where="x_test.sv")


@pytest.mark.parametrize(
    "source",
    [
        "module TopModule(output [3:0] w); assign w = $clog2(9) + $bits(w) + $signed(4'd1); endmodule",
        'module TopModule; initial $display("$finish %s", "$fopen"); // $fopen("x")\nendmodule',
        "module TopModule; /* $finish; tb.stats1.errors = 0; */ logic [1:0] s; assign s = q[$]; endmodule",
        "module TopModule(input a, output b); Sub u(.tb(a), .out(b)); endmodule",
    ],
)
def test_screen_allows_harmless_designs(source):
    assert screen_design(source) is None


@pytest.mark.parametrize(
    "source, reason",
    [
        ("initial $finish;", r"\$finish"),
        ("initial \\$fatal ;", r"\$fatal"),
        ("initial x = $random;", r"\$random"),
        ("initial $dumpvars;", r"\$dumpvars"),
        ("initial $root.tb.x = 1;", r"\$root"),
        ("initial force q = 1;", "force"),
        ("always @* tb.stats1.errors = 0;", "into the testbench"),
        ("assign o = good1 . out;", "into the testbench"),
        ('import "DPI-C" function int f();', "DPI"),
        ('`include "x.v"', "directive `include"),
        ("`MACRO", "directive `MACRO"),
    ],
)
def test_screen_rejects(source, reason):
    rejection = screen_design(f"module TopModule(output o);\n{source}\nendmodule\n")
    assert rejection is not None and rejection.line == 2
    assert re.search(reason, rejection.reason)


def test_screen_rejects_testbench_module_names_and_include():
    assert "tb" in screen_design("module tb; endmodule").reason
    assert "RefModule" in screen_design("module \\RefModule ; endmodule").reason
    assert find_include('// `include "a"\n`include "/etc/passwd"\n').line == 2
    assert find_include('// `include "a"\n$display("`include");\n') is None


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (5, 1, 1, Fraction(1, 5)),
        (5, 2, 1, Fraction(2, 5)),
        (10, 3, 5, 1 - Fraction(math.comb(7, 5), math.comb(10, 5))),  # 1 - 21/252
        (20, 1, 10, Fraction(1, 2)),
        (5, 1, 5, 1),  # n = k with a pass
        (5, 0, 5, 0),  # n = k without
        (7, 0, 3, 0),  # c = 0
        (7, 7, 3, 1),  # c = n
        (10, 8, 3, 1),  # n - c < k
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-12)


def test_pass_at_k_is_stable_for_large_n_and_validates():
    exact = 1 - Fraction(math.comb(150, 100), math.comb(300, 100))
    assert pass_at_k(300, 150, 100) == pytest.approx(float(exact), rel=1e-12)
    for bad in [(5, 6, 1), (5, 2, 6), (5, 2, 0), (5, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_upstream_percent_truncates_and_summary_averages():
    assert [upstream_percent(3, 1), upstream_percent(3, 2), upstream_percent(20, 13)] == [33, 66, 65]
    scores = [ProblemScore("a", list(".RS"), list("..S")), ProblemScore("b", list("..."), list("..."))]
    summary = summarize(scores, [1, 3], "strict")
    assert summary["pass_at_k"] == {"1": pytest.approx((1 / 3 + 1) / 2), "3": 1.0}
    assert summary["upstream_pass_rate"] == (33 + 100) / 2
    assert summary["upstream_compatible_pass_at_1"] == pytest.approx((2 / 3 + 1) / 2)
    assert summary["categories"] == {".": 4, "S": 1, "R": 1}
    assert "| a | 3 | 1 | 0 | 33.3 | 100.0 | 33 | `.RS` |" in markdown_report(summary)  # 0 failed generations
    assert summarize(scores, [5], "strict")["pass_at_k"] == {"5": None}  # k > n: not estimable
