"""Named protocols (--protocol codev-r1), reasoning models' completions, and the engine each evaluation records."""

from __future__ import annotations

import json
import shutil
import typing

import pytest

from crosstune.evals.generation.cache import SamplingParams
from crosstune.evals.generation.endpoint import EndpointGenerator
from crosstune.evals.judge.extract import extract_code
from crosstune.evals.problems.protocols import PROTOCOLS, get_protocol, protocol_record
from crosstune.evals.settings import EvalError, EvalOptions, EvalSettings, protocol_tasks
from crosstune.recipe.schema import EvalSection
from tests.helpers.evals import echo_answer, run
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.paths import FIXTURES

CHECKOUT, RTLLM_SET = FIXTURES / "verilogeval", FIXTURES / "rtllm"
needs_iverilog = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs iverilog (make setup)")


def test_codev_r1_follows_the_benchmark_script_per_benchmark():
    codev = get_protocol("codev-r1")
    assert codev.settings("verilogeval") == {
        "n": 20,
        "k": [1, 5, 10],
        "temperature": 1.0,
        "top_p": 1.0,
        "max_tokens": 16384,
        "prompt_style": "codev",
        "shots": 0,
    }
    assert (codev.settings("rtllm")["temperature"], codev.settings("rtllm")["top_p"]) == (1.0, 0.95)
    card = get_protocol("codev-r1-card").settings("verilogeval")
    assert (card["n"], card["temperature"], card["max_tokens"]) == (20, 0.6, 16384)
    assert codev.tasks == ("spec-to-rtl", "code-complete-iccad2023", "rtllm")
    with pytest.raises(ValueError, match="unknown protocol 'codev'; choose one of codev-r1, codev-r1-card"):
        get_protocol("codev")


def test_the_recipe_accepts_exactly_the_named_protocols():
    assert set(typing.get_args(typing.get_args(EvalSection.model_fields["protocol"].annotation)[0])) == set(PROTOCOLS)


def test_record_lists_every_departure_from_the_preset():
    used = {**get_protocol("codev-r1").settings("rtllm"), "n": 5, "k": [1]}
    record = protocol_record("codev-r1", "rtllm", used)
    assert record["deviations"] == {"n": {"protocol": 20, "used": 5}, "k": {"protocol": [1, 5, 10], "used": [1]}}
    assert record["follows"] is False and record["source"] == "IPRC-DIP/CodeV-R1 test/benchmark_runner.sh"
    assert protocol_record(None, "rtllm", used) == {"name": "custom", "settings": used}


def test_a_protocol_s_settings_take_the_suite_from_the_problems():
    codev = EvalOptions(protocol="codev-r1")
    settings = EvalSettings.resolve(options=codev, problems=RTLLM_SET)
    assert (settings.sampling.n, settings.sampling.temperature, settings.sampling.top_p) == (20, 1.0, 0.95)
    assert (settings.ks, settings.prompt_style, settings.protocol) == ((1, 5, 10), "codev", "codev-r1")
    assert EvalSettings.resolve(options=codev, problems=CHECKOUT).sampling.top_p == 1
    with pytest.raises(EvalError, match="unknown protocol"):
        EvalSettings.resolve(options=EvalOptions(protocol="nope"), problems=CHECKOUT)
    with pytest.raises(EvalError, match="no problem set to take its suite from"):
        EvalSettings.resolve(options=codev)
    assert protocol_tasks("codev-r1", CHECKOUT) == ["spec-to-rtl", "code-complete-iccad2023"]
    assert protocol_tasks("codev-r1", CHECKOUT / "dataset_spec-to-rtl") == [None]
    assert protocol_tasks("codev-r1", RTLLM_SET) == [None]


def test_help_names_the_protocols():
    result = run("--help")
    assert result.exit_code == 0 and "--protocol" in result.output
    assert "codev-r1" in result.output and "codev-r1-card" in result.output


@needs_iverilog
def test_protocol_runs_its_tasks_and_is_recorded(tmp_path):
    args = [
        "--problems",
        str(CHECKOUT),
        "--problem",
        "Prob001_zero",
        "--out",
        str(tmp_path),
        "--model",
        "m",
        "--protocol",
        "codev-r1",
        "--n",
        "2",
        "--k",
        "1",
        "--max-tokens",
        "64",
    ]
    with FakeOpenAI(answer=echo_answer) as server:
        result = run(*args, "--endpoint", server.url)
    assert result.exit_code == 0, result.output
    assert {(r["temperature"], r["top_p"], r["max_tokens"]) for r in server.requests} == {(1.0, 1.0, 64)}
    assert all("<think>" in r["messages"][0]["content"] for r in server.requests)  # the codev prompt
    for task in ("spec-to-rtl", "code-complete-iccad2023"):  # both of the protocol's tasks the checkout holds
        summary = json.loads((tmp_path / task / "summary.json").read_text())
        assert summary["task"] == task and summary["protocol"]["name"] == "codev-r1"
        assert set(summary["protocol"]["deviations"]) == {"n", "k", "max_tokens"}
        assert summary["engine"] == {
            "name": "openai-compatible endpoint",
            "kind": "endpoint",
            "url": f"{server.url}/v1",
        }
        assert (
            "- protocol: codev-r1 (departs from it in n, k, max_tokens)" in (tmp_path / task / "summary.md").read_text()
        )


@needs_iverilog
def test_recipe_protocol_line_and_its_written_lines(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: r\nmodel: {family: gemma4, size: tiny}\ndata: {sources: [{path: x.jsonl}]}\n"
        f"eval: {{problems: {CHECKOUT / 'dataset_spec-to-rtl'}, protocol: codev-r1-card, samples: 2, "
        "k: [1, 2]}\n"
    )
    with FakeOpenAI(answer=echo_answer) as server:
        result = run(
            str(recipe),
            "--problem",
            "Prob001_zero",
            "--endpoint",
            server.url,
            "--model",
            "m",
            "--out",
            str(tmp_path / "o"),
        )
    assert result.exit_code == 0, result.output
    # T and top_p from the protocol (the recipe's own defaults, 0.8 and 0.95, are not written); n and k from the recipe
    assert {(r["temperature"], r["top_p"], r["max_tokens"]) for r in server.requests} == {(0.6, 0.95, 16384)}
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["protocol"]["name"] == "codev-r1-card" and set(summary["protocol"]["deviations"]) == {"n", "k"}


def test_unfinished_reasoning_has_no_answer_and_closed_reasoning_is_dropped():
    assert extract_code("<think>first the carry, then").rule == "unfinished_reasoning"
    assert extract_code("<think>a</think> answer <think>again").rule == "unfinished_reasoning"
    closed = extract_code(
        "<think>```verilog\nmodule Draft; endmodule\n```</think><answer>```verilog\n"
        "module TopModule; endmodule\n```</answer>"
    )
    assert (closed.code, closed.rule) == ("module TopModule; endmodule\n", "answer_fenced")
    opened_by_template = extract_code("reasoning...</think>\nmodule TopModule; endmodule")  # no <think> in the text
    assert (opened_by_template.code, opened_by_template.rule) == ("module TopModule; endmodule\n", "module")
    assert extract_code("module adder(input a); endmodule", top="adder").rule == "module"


def vllm_like(content: str | None, finish: str) -> FakeOpenAI:
    """/v1/models owned by vllm, /version, and a chat answer split by a reasoning parser."""
    message = {"role": "assistant", "content": content, "reasoning_content": "thinking"}
    return FakeOpenAI(
        answer=lambda body: message, finish_reason=finish, served=["m"], owned_by="vllm", version="0.11.0"
    )


def test_vllm_is_named_and_split_reasoning_is_put_back():
    with vllm_like("<answer>ok</answer>", "stop") as answered:
        client = EndpointGenerator(answered.url, "m", retries=0)
        client.probe()
        assert client.engine["name"] == "vllm 0.11.0" and client.engine["server"] == "vllm"
        assert client.complete([], SamplingParams(), 0).text == "<think>thinking</think><answer>ok</answer>"
    with vllm_like(None, "length") as cut:  # the budget ran out while thinking: no content at all
        text = EndpointGenerator(cut.url, "m", retries=0).complete([], SamplingParams(), 0).text
    assert text == "<think>thinking" and extract_code(text).rule == "unfinished_reasoning"


@needs_iverilog
def test_a_samples_file_keeps_the_engine_its_records_name(tmp_path):
    args = ["--problems", str(CHECKOUT), "--problem", "Prob001_zero", "--model", "m", "--n", "2", "--k", "1"]
    with FakeOpenAI(answer=echo_answer) as server:
        assert run(*args, "--endpoint", server.url, "--out", str(tmp_path / "a")).exit_code == 0
    cache = tmp_path / "a" / "completions.jsonl"
    rescored = run(
        "--problems",
        str(CHECKOUT),
        "--problem",
        "Prob001_zero",
        "--samples-file",
        str(cache),
        "--k",
        "1",
        "--protocol",
        "codev-r1",
        "--task",
        "spec-to-rtl",
        "--out",
        str(tmp_path / "b"),
    )
    assert rescored.exit_code == 0, rescored.output
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["engine"]["name"] == "openai-compatible endpoint" and summary["engine"]["url"] == f"{server.url}/v1"
    assert summary["protocol"]["settings_observed"] is False  # the settings are the caller's word, not observed
    references = run(
        "--problems", str(CHECKOUT), "--problem", "Prob001_zero", "--references-only", "--out", str(tmp_path / "c")
    )
    assert references.exit_code == 0, references.output
    assert json.loads((tmp_path / "c" / "summary.json").read_text())["engine"]["kind"] == "reference"
