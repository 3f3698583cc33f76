"""Problem loading, prompts and code extraction for `crosstune eval` (no simulator needed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from crosstune.evals.judge.extract import RULES, extract_code
from crosstune.evals.problems.examples import EXAMPLES
from crosstune.evals.problems.problem_sets import CODE_COMPLETE, SPEC_TO_RTL, ProblemSetError, load_problems
from crosstune.evals.problems.prompt_styles import SPEC_SYSTEM, build_messages, prompt_hash
from crosstune.synth import generate_corpus
from tests.helpers.paths import FIXTURES

CHECKOUT = FIXTURES / "verilogeval"


def test_loads_by_problems_txt_and_ignores_stray_files():
    problems = load_problems(CHECKOUT, SPEC_TO_RTL)
    assert [p.name for p in problems] == ["Prob001_zero", "Prob002_and2", "Prob003_dff8r", "Prob004_longcount"]
    assert all(p.task == SPEC_TO_RTL and p.ifc is None for p in problems)
    assert "module RefModule" in problems[1].ref and "module tb" in problems[1].test
    assert (CHECKOUT / "dataset_spec-to-rtl" / "Prob999_stray_test.sv").exists()  # present, never loaded


def test_code_complete_reads_interfaces_and_task_folder_directly():
    problems = load_problems(CHECKOUT / "dataset_code-complete-iccad2023")
    assert {p.task for p in problems} == {CODE_COMPLETE}
    assert problems[2].ifc.startswith("module TopModule (")
    assert load_problems(CHECKOUT, CODE_COMPLETE)[0].name == "Prob001_zero"


def test_selection_by_name_glob_and_comma_list():
    assert [p.name for p in load_problems(CHECKOUT, patterns=["Prob00[12]*"])] == ["Prob001_zero", "Prob002_and2"]
    chosen = load_problems(CHECKOUT, patterns=["Prob003_dff8r,Prob001_zero"])
    assert [p.name for p in chosen] == ["Prob001_zero", "Prob003_dff8r"]
    with pytest.raises(ProblemSetError, match="Prob777"):
        load_problems(CHECKOUT, patterns=["Prob777*"])


def test_missing_file_error_names_the_file(tmp_path):
    folder = tmp_path / "set"
    shutil.copytree(CHECKOUT / "dataset_spec-to-rtl", folder)
    (folder / "Prob002_and2_test.sv").unlink()
    with pytest.raises(ProblemSetError, match=r"Prob002_and2_test\.sv: missing file of problem 'Prob002_and2'"):
        load_problems(folder)


def test_folder_without_problems_txt_is_a_clear_error(tmp_path):
    with pytest.raises(ProblemSetError, match="neither holds problems.txt"):
        load_problems(tmp_path)
    with pytest.raises(ProblemSetError, match="no such problem folder"):
        load_problems(tmp_path / "absent")


def test_verilogeval_prompt_matches_upstream_layout():
    problem = load_problems(CHECKOUT, patterns=["Prob002_and2"])[0]
    system, user = build_messages(problem, "verilogeval", shots=0)
    assert system == {"role": "system", "content": SPEC_SYSTEM}
    expected = (
        f"\nQuestion:\n{problem.prompt.strip()}\n\nEnclose your code with [BEGIN] and [DONE]. Only output the "
        "code snippet\nand do NOT output anything else.\n\nAnswer:\n"
    )
    assert user == {"role": "user", "content": expected}


def test_shots_prepend_solved_examples_and_change_the_hash():
    problem = load_problems(CHECKOUT, patterns=["Prob002_and2"])[0]
    zero, two = build_messages(problem, shots=0), build_messages(problem, shots=2)
    content = two[1]["content"]
    assert content.count("Question:") == 3 and content.count("[BEGIN]") == 3 + 2  # a rule per question, 2 answers
    assert EXAMPLES[1].body.strip() in content and content.endswith(zero[1]["content"])
    assert prompt_hash(zero) != prompt_hash(two)
    with pytest.raises(ValueError, match="shots"):
        build_messages(problem, shots=len(EXAMPLES) + 1)


def test_code_complete_prompt_comments_the_spec_above_the_interface():
    problem = load_problems(CHECKOUT, CODE_COMPLETE, ["Prob003_dff8r"])[0]
    user = build_messages(problem, "verilogeval")[1]["content"]
    assert "// Implement 8 D flip-flops" in user
    assert "\nmodule TopModule (\n  input clk," in user  # the header itself stays uncommented


def test_codev_prompt_asks_for_think_and_answer(tmp_path: Path):
    problem = load_problems(CHECKOUT, patterns=["Prob002_and2"])[0]
    messages = build_messages(problem, "codev", shots=1)
    assert "<think>" in messages[0]["content"] and "```verilog" in messages[0]["content"]
    # The system prompt the synthetic training records carry: a fine-tuned model is asked in its training words.
    generate_corpus(tmp_path, n_train=1, n_eval=0, seed=0)
    corpus_system = json.loads((tmp_path / "train.jsonl").read_text().splitlines()[0])["system"]
    assert messages[0]["content"] == corpus_system
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"].startswith("<think>") and "<answer>" in messages[2]["content"]
    with pytest.raises(ValueError, match="prompt style"):
        build_messages(problem, "chatty")


MODULE = "module TopModule(input a, output b);\n  assign b = a;\nendmodule"


@pytest.mark.parametrize(
    "completion, rule",
    [
        (f"Sure.\n[BEGIN]\n{MODULE}\n[DONE]\nDone.", "begin_done"),
        (f"```\nnot this\n```\ntext\n```verilog\n{MODULE}\n```\n```\nnor this\n```", "fenced_verilog"),
        (f"```\nfirst\n```\n```\n{MODULE}\n```", "fenced"),
        (
            f"<think>```verilog\nmodule Draft;\nendmodule\n```</think><answer>\n```verilog\n{MODULE}\n```\n</answer>",
            "answer_fenced",
        ),
        (f"<answer>x</answer><answer>{MODULE}</answer>", "answer"),
        (f"Here it is:\n```verilog\n{MODULE}", "fenced_unterminated"),
        (f"The design:\n{MODULE}\nThat's all.", "module"),
    ],
)
def test_extraction_rules(completion, rule):
    extraction = extract_code(completion)
    assert extraction.rule == rule and rule in RULES
    assert extraction.code.strip() == MODULE


def test_extraction_falls_back_to_raw_text():
    assert extract_code("I cannot help with that.").rule == "raw"


def test_code_complete_prepends_interface_only_without_header():
    ifc = "module TopModule (\n  input a,\n  output b\n);"
    body = extract_code("```verilog\n  assign b = a;\nendmodule\n```", ifc)
    assert body.interface_prepended and body.code.startswith(ifc) and "assign b = a;" in body.code
    full = extract_code(f"```verilog\n{MODULE}\n```", ifc)
    assert not full.interface_prepended and full.code.strip() == MODULE
