"""RTLLM: the layout read from the folders, the design's name, the strict verdict against the testbench's own lines,
and the references-only self-check, on crosstune's own fixtures in RTLLM's layout (tests/fixtures/rtllm)."""

from __future__ import annotations

import json
import shutil

import pytest

from crosstune.evals.evaluate import evaluate_completions
from crosstune.evals.judge.simulate import reference_as_design
from crosstune.evals.judge.verdict import rtllm_strict_verdict, rtllm_upstream_verdict
from crosstune.evals.problems.problem_sets import RTLLM, ProblemSetError, load_problems, suite_of
from crosstune.evals.problems.rtllm import instrument_testbench
from tests.helpers.paths import FIXTURES

V2, V11 = FIXTURES / "rtllm", FIXTURES / "rtllm-v11"
needs_iverilog = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs iverilog (make setup)")


def test_layouts_are_detected_and_read():
    problems = load_problems(V2)
    assert [p.name for p in problems] == ["adder_4bit", "counter_pipe", "rom_table"]  # sorted by path
    assert {p.task for p in problems} == {RTLLM} and suite_of(V2) == "rtllm" and suite_of(V11) == "rtllm"
    adder, counter, rom = problems
    assert (adder.top, adder.ref_top, adder.testbench_top) == ("adder_4bit", "verified_adder_4bit", "adder_4bit_tb")
    assert adder.prompt.startswith("Please act as a professional verilog designer.") and adder.ifc is None
    # TEST_DESIGN = counter_pip is instantiated nowhere: the description's module name is the one the testbench uses
    assert (counter.top, counter.ref_top, counter.testbench_top) == ("counter_pipe", "verified_counter", "counter_tb")
    assert (rom.top, rom.ref_top) == ("rom_table", "rom_table")  # already named after the design
    assert rom.data_files == (("reference.txt", b"00\n11\n22\n33\n44\n55\n66\n77\n"),)
    assert [p.name for p in load_problems(V11)] == ["parity_8bit"]  # v1.1: flat
    assert [p.name for p in load_problems(V2 / "Control")] == ["counter_pipe"]  # a category folder
    assert [p.name for p in load_problems(V2, patterns=["*_4bit,rom*"])] == ["adder_4bit", "rom_table"]


def test_reference_becomes_the_design():
    counter = load_problems(V2, patterns=["counter_pipe"])[0]
    design = reference_as_design(counter)
    assert "module counter_pipe (" in design and "verified_counter" not in design


def test_malformed_design_folders_name_the_file(tmp_path):
    folder = tmp_path / "adder_4bit"
    shutil.copytree(V2 / "Arithmetic" / "Adder" / "adder_4bit", folder)
    (folder / "testbench.v").write_text((folder / "testbench.v").read_text().replace("Your Design Passed", "ok"))
    with pytest.raises(ProblemSetError, match=r"adder_4bit/testbench.v: no `\$display\(\"... Your Design Passed"):
        load_problems(tmp_path)
    shutil.copy(V2 / "Arithmetic" / "Adder" / "adder_4bit" / "testbench.v", folder / "testbench.v")
    (folder / "verified_adder_4bit.v").write_text("module something_else (input a); endmodule\n")
    with pytest.raises(ProblemSetError, match=r"verified_adder_4bit.v: defines neither adder_4bit nor exactly one"):
        load_problems(tmp_path)
    (folder / "verified_adder_4bit.v").unlink()
    with pytest.raises(ProblemSetError, match="expected one verified_\\*.v reference, found 0"):
        load_problems(tmp_path)
    (folder / "makefile").write_text("TEST_DESIGN = nothing\n")
    (folder / "design_description.txt").write_text("Module name: nothing_either\n")
    with pytest.raises(ProblemSetError, match=r"instantiates neither .* \(nothing, nothing_either\)"):
        load_problems(tmp_path)


def test_instrumentation_tags_the_pass_and_every_failure_display():
    test = (
        'if (e == 0) $display("===Your Design Passed===");\n'
        'else $display("=== Test completed with %d failures ===", e);\n'
        '// $display("Error: commented out");\n'
    )
    assert instrument_testbench(test, "cafe") == (
        'if (e == 0) begin $display("===Your Design Passed==="); $display("cafe pass"); end\n'
        'else begin $display("=== Test completed with %d failures ===", e); $display("cafe fail"); end\n'
        '// begin $display("Error: commented out"); $display("cafe fail"); end\n'  # still a comment
    )


def test_strict_verdict_reads_only_the_tokened_lines():
    assert rtllm_strict_verdict(0, "x\ntok pass\n", "tok").code == "."
    assert rtllm_strict_verdict(0, "===Your Design Passed===\n", "tok").code == "R"  # printed by anyone: not ours
    assert rtllm_strict_verdict(0, "tok fail\ntok pass\n", "tok").detail == "the testbench printed 1 failure line(s)"
    assert rtllm_strict_verdict(1, "tok pass\n", "tok").code == "R"
    assert rtllm_strict_verdict(0, "xtok pass\n", "tok").code == "R"
    assert rtllm_upstream_verdict("I bypass the test\n") == "."  # auto_run.py: any "pass" substring
    assert rtllm_upstream_verdict("=== Failed ===\n") == "R"


def fenced(code: str) -> str:
    return f"<think>a 4-bit add</think><answer>\n```verilog\n{code}\n```\n</answer>"


ADDER = "module adder_4bit(input [3:0] a, input [3:0] b, output [4:0] sum);\n  assign sum = {body};\nendmodule"


@needs_iverilog
def test_designs_get_their_verdicts(tmp_path):
    problems = load_problems(V2, patterns=["adder_4bit", "rom_table"])
    completions = {
        "adder_4bit": [
            fenced(ADDER.format(body="a + b")),  # right
            fenced(ADDER.format(body="a - b")),  # wrong: the testbench prints failure lines
            fenced(
                ADDER.format(body="a ^ b").replace("endmodule", 'initial $display("Your Design Passed");\nendmodule')
            ),
            fenced(ADDER.format(body="a + b").replace("endmodule", 'initial $display("Failed: fake");\nendmodule')),
            fenced(ADDER.format(body="a + b").replace("endmodule", "initial $finish;\nendmodule")),  # rejected
            fenced(ADDER.format(body="adder_4bit_tb.a + b")),  # reaches into the testbench: rejected
            fenced(
                "module adder_4bit(input [3:0] a, input [3:0] b, output [4:0] sum);\n  assign sum = a + b;\n"
                "  always @(a) while (1) ;\nendmodule"
            ),  # hangs
            "<think>still adding up the bits",  # never closed its thinking
        ],
        "rom_table": [
            fenced(
                "module rom_table(input [2:0] addr, output [7:0] data);\n  assign data = {5'd0, addr} "
                "* 8'h11;\nendmodule"
            )
        ]
        * 8,
    }
    from crosstune.evals.judge.sandbox import Limits

    report = evaluate_completions(problems, completions, tmp_path, ks=(1,), workers=2, limits=Limits(timeout_s=3))
    rows = {r["problem"]: r for r in report.summary["per_problem"]}
    # strict: right, wrong, wrong with a printed pass line, right with a printed failure line (only the testbench's
    # own lines count), $finish, into the testbench, hang, unfinished reasoning
    assert rows["adder_4bit"]["codes"] == ".RR.XXTU"
    assert rows["adder_4bit"]["upstream_compatible_codes"] == ".R..XXTU"  # auto_run.py is fooled by the printed line
    assert rows["rom_table"]["codes"] == "........"  # the testbench read reference.txt beside it
    records = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert "system task/function $finish is not allowed" in records[4]["detail"]
    assert records[7]["rule"] == "unfinished_reasoning" and records[7]["verdict"] == "U"


@needs_iverilog
def test_references_only_through_the_cli(tmp_path):
    from tests.helpers.evals import run

    result = run("--problems", str(V2), "--references-only", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["task"], summary["problems"], summary["references_passing"]) == ("rtllm", 3, 3)
    assert summary["pass_at_k"] == {"1": 1.0} and summary["pass_at_k_ci"] == {"1": [1.0, 1.0]}
    assert "RTLLM (strict verdict)" in result.output
    assert (tmp_path / "summary.md").read_text().startswith("# RTLLM evaluation (strict verdict)")
    wrong_task = run("--problems", str(V2), "--references-only", "--task", "spec-to-rtl", "--out", str(tmp_path))
    assert wrong_task.exit_code != 0 and "is an RTLLM checkout" in wrong_task.output
