"""A problem set is a root (crosstune.evals.problems.benchmark.problem_file, through crosstune.confinement): every file
read of it (listing, prompt, interface, reference, testbench, RTLLM data) stays inside the folder given as
--problems. A prompt linked to a key file was sent to the endpoint; a reference linked outside was compiled; an RTLLM
design folder reached through a folder link was read. A link that stays inside the set is followed."""

from __future__ import annotations

import json
import shutil

from crosstune.evals.problems.problem_sets import load_problems
from tests.helpers.evals import echo_answer, run
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.paths import FIXTURES

CANARY = "CANARY-3f9e sk-live-0123456789abcdef"  # stands in for a key file beside the checkout
TASK = "dataset_spec-to-rtl"


def _checkout(tmp_path):
    shutil.copytree(FIXTURES / "verilogeval", tmp_path / "set")
    (tmp_path / "key.txt").write_text(CANARY)
    return tmp_path / "set"


def _one_line(output: str) -> str:
    assert "Traceback" not in output and CANARY not in output, output
    return " ".join(output.split())


def test_a_prompt_linked_out_of_the_problem_set_never_reaches_the_endpoint(tmp_path):
    checkout = _checkout(tmp_path)
    prompt = checkout / TASK / "Prob001_zero_prompt.txt"
    prompt.unlink()
    prompt.symlink_to(tmp_path / "key.txt")
    args = ["--problems", str(checkout), "--problem", "Prob00*", "--model", "m", "--out", str(tmp_path / "out")]
    with FakeOpenAI(answer=echo_answer) as server:
        result = run(*args, "--endpoint", server.url)
    assert result.exit_code == 1
    assert (
        f"{prompt} leads out of --problems {checkout} (to {tmp_path}/key.txt): copy the file itself into the "
        "problem set, or remove the link"
    ) in _one_line(result.output)
    assert server.requests == [] and CANARY not in json.dumps(server.requests)


def test_a_reference_linked_out_of_the_problem_set_is_never_compiled(tmp_path):
    checkout = _checkout(tmp_path)
    outside = tmp_path / "elsewhere.sv"
    outside.write_text(
        f"// {CANARY}\nmodule RefModule(input a, input b, output out);\n  assign out = a & b;\nendmodule\n"
    )
    ref = checkout / TASK / "Prob002_and2_ref.sv"
    ref.unlink()
    ref.symlink_to(outside)
    result = run(
        "--problems", str(checkout), "--references-only", "--problem", "Prob002_and2", "--out", str(tmp_path / "o")
    )
    assert result.exit_code == 1 and f"{ref} leads out of --problems {checkout}" in _one_line(result.output)
    assert not (tmp_path / "o").exists()  # refused while reading the set: nothing simulated, nothing written


def test_rtllm_designs_and_their_files_stay_inside_the_checkout(tmp_path):
    checkout = tmp_path / "rtllm"
    shutil.copytree(FIXTURES / "rtllm", checkout)
    shutil.copytree(checkout / "Arithmetic" / "Adder" / "adder_4bit", tmp_path / "outside" / "adder_8bit")
    (checkout / "Arithmetic" / "Linked").symlink_to(tmp_path / "outside")  # a folder link: not followed
    assert [p.name for p in load_problems(checkout)] == ["adder_4bit", "counter_pipe", "rom_table"]
    testbench = checkout / "Control" / "Counter" / "counter_pipe" / "testbench.v"
    shutil.move(testbench, tmp_path / "testbench.v")
    testbench.symlink_to(tmp_path / "testbench.v")
    result = run("--problems", str(checkout), "--references-only", "--out", str(tmp_path / "o"))
    assert result.exit_code == 1 and f"{testbench} leads out of --problems {checkout}" in _one_line(result.output)


def test_a_link_that_stays_inside_the_problem_set_is_read(tmp_path):
    checkout = _checkout(tmp_path)
    shared = checkout / "shared_prompt.txt"
    prompt = checkout / TASK / "Prob002_and2_prompt.txt"
    shutil.move(prompt, shared)
    prompt.symlink_to(shared)
    (checkout / "alias").symlink_to(checkout)  # the set named through a link of its own: the same root
    problems = {p.name: p for p in load_problems(checkout / "alias")}
    assert problems["Prob002_and2"].prompt == shared.read_text()


def test_a_problem_set_named_by_a_relative_path_is_read_and_its_links_out_still_refused(tmp_path, monkeypatch):
    # `--problems set` read set/set/... (a relative name joined to the root twice; found by the fuzzer)
    checkout = _checkout(tmp_path)
    monkeypatch.chdir(tmp_path)
    problems = load_problems(checkout.relative_to(tmp_path))
    assert [p.name for p in problems][:2] == ["Prob001_zero", "Prob002_and2"]
    prompt = checkout / TASK / "Prob001_zero_prompt.txt"
    prompt.unlink()
    prompt.symlink_to(tmp_path / "key.txt")
    result = run("--problems", "set", "--references-only", "--out", "out")
    assert result.exit_code == 1 and "leads out of --problems" in _one_line(result.output)
