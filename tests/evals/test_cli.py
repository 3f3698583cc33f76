"""`crosstune eval` end to end: references-only, samples file, endpoint (fake server), argument errors."""

from __future__ import annotations

import inspect
import json
import shutil

import pytest

from crosstune.evals.cli import eval_command
from tests.helpers.evals import echo_answer, make_app, run, runner
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.paths import FIXTURES

pytestmark = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs iverilog (make setup)")

CHECKOUT = FIXTURES / "verilogeval"


def test_help_explains_sources_and_options():
    result = run("--help")
    assert result.exit_code == 0
    for text in ["--references-only", "--samples-file", "--upstream-compatible", "--prompt-style", "--timeout"]:
        assert text in result.output


def test_references_only_self_check(tmp_path):
    result = run("--problems", str(CHECKOUT), "--references-only", "--problem", "Prob00[12]*", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["pass_at_k"] == {"1": 1.0} and summary["problems"] == 2
    assert "Prob002_and2" in result.output and (tmp_path / "summary.md").exists()


def test_samples_file_strict_and_upstream_compatible(tmp_path):
    wrong_with_fake_line = (
        "```verilog\nmodule TopModule(input a, input b, output out);\n  assign out = a | b;\n"
        '  final $display("Mismatches: 0 in 107 samples");\nendmodule\n```'
    )
    right = "[BEGIN]\nmodule TopModule(input a, input b, output out);\n  assign out = a & b;\nendmodule\n[DONE]"
    samples = tmp_path / "samples.jsonl"
    samples.write_text(
        "".join(json.dumps({"problem": "Prob002_and2", "completion": c}) + "\n" for c in [right, wrong_with_fake_line])
    )
    common = [
        "--problems",
        str(CHECKOUT / "dataset_spec-to-rtl"),
        "--problem",
        "Prob002_and2",
        "--samples-file",
        str(samples),
        "--k",
        "1,2",
    ]
    strict = run(*common, "--out", str(tmp_path / "strict"))
    upstream = run(*common, "--out", str(tmp_path / "upstream"), "--upstream-compatible")
    assert strict.exit_code == 0 and upstream.exit_code == 0, strict.output + upstream.output
    strict_summary = json.loads((tmp_path / "strict" / "summary.json").read_text())
    upstream_summary = json.loads((tmp_path / "upstream" / "summary.json").read_text())
    assert strict_summary["per_problem"][0]["codes"] == ".R"
    assert upstream_summary["per_problem"][0]["codes"] == ".."  # fooled, as upstream is
    assert upstream_summary["strict_pass_at_1"] == 0.5


def test_endpoint_generates_caches_and_resumes(tmp_path):
    args = [
        "--problems",
        str(CHECKOUT),
        "--problem",
        "Prob001_zero",
        "--out",
        str(tmp_path),
        "--model",
        "m",
        "--n",
        "2",
        "--k",
        "1,2",
        "--temperature",
        "0.8",
    ]
    with FakeOpenAI(answer=echo_answer) as server:
        first = run(*args, "--endpoint", server.url)
        second = run(*args, "--endpoint", server.url)
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    assert len(server.requests) == 2  # the second run read everything from OUT/completions.jsonl
    assert "samples: 0 of 2 from the cache" in first.output and "samples: 2 of 2 from the cache" in second.output
    records = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [r["rule"] for r in records] == ["begin_done", "begin_done"]
    assert {r["verdict"] for r in records} == {"m"}  # the fake server's answer holds no module


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "exactly one of"),
        (["--references-only", "--samples-file", "x.jsonl"], "exactly one of"),
        (["--endpoint", "http://127.0.0.1:9"], "needs --model"),
        (["--endpoint", "http://127.0.0.1:9", "--model", "m", "--n", "2", "--k", "1,5"], "needs --n >= 5"),
        (["--references-only", "--problem", "Nope*"], "no problem matches"),
    ],
)
def test_argument_errors_are_explained(tmp_path, args, message):
    result = runner.invoke(make_app(), ["eval", "--problems", str(CHECKOUT), "--out", str(tmp_path), *args])
    assert result.exit_code == 1, result.output  # a refusal, one line: exit 2 is typer's own usage errors
    assert message in result.output


def test_recipe_eval_section_gives_defaults(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: r\nmodel: {family: gemma4, size: tiny}\ndata: {sources: [{path: x.jsonl}]}\n"
        f"eval: {{problems: {CHECKOUT / 'dataset_spec-to-rtl'}, samples: 3, k: [1, 2], temperature: 0.5}}\n"
    )
    samples = tmp_path / "samples.jsonl"
    right = "[BEGIN]\nmodule TopModule(input a, input b, output out);\n  assign out = a & b;\nendmodule\n[DONE]"
    wrong = right.replace("a & b", "a | b")
    samples.write_text(
        "".join(json.dumps({"problem": "Prob002_and2", "completion": c}) + "\n" for c in [right, wrong, wrong])
    )
    result = run(str(recipe), "--problem", "Prob002_and2", "--samples-file", str(samples), "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    # n = 3 samples, c = 1 correct: pass@1 = 1/3, pass@2 = 1 - C(2,2)/C(3,2) = 2/3 (k from the recipe).
    assert summary["pass_at_k"] == pytest.approx({"1": 1 / 3, "2": 2 / 3})


def test_library_api_config_in_report_out(tmp_path, capsys):
    """run_eval is a library call: an EvalConfig in, an EvalReport out, nothing printed; errors are EvalError."""
    from crosstune.evals.runner import run_eval
    from crosstune.evals.settings import EvalConfig, EvalError, EvalOptions, EvalSettings

    with pytest.raises(EvalError, match="exactly one of"):
        EvalConfig(problems=CHECKOUT, out=tmp_path)
    with pytest.raises(EvalError, match="needs --n >= 10"):
        settings = EvalSettings.resolve(options=EvalOptions(k=(1, 10)))
        EvalConfig(problems=CHECKOUT, out=tmp_path, endpoint="http://x", model="m", settings=settings)
    config = EvalConfig(problems=CHECKOUT, out=tmp_path, references_only=True, patterns=("Prob002_and2",))
    phases = []
    report = run_eval(config, on_progress=lambda phase, done, total: phases.append(phase))
    assert report.summary["pass_at_k"] == {"1": 1.0} and phases[-1] == "references"
    assert capsys.readouterr().out == ""
    with pytest.raises(EvalError, match="no problem matches"):
        run_eval(EvalConfig(problems=CHECKOUT, out=tmp_path / "b", references_only=True, patterns=("Nope*",)))


def test_sampling_and_timeout_defaults_are_the_recipes_everywhere(tmp_path):
    """One owner (recipe/schema.py EVAL_DEFAULTS): the schema, the library's SamplingParams (the cache key's fields),
    Timeouts and EvalConfig, and the command without a recipe, all say the same."""
    from crosstune.evals.generation.cache import SamplingParams
    from crosstune.evals.generation.endpoint import Timeouts
    from crosstune.evals.settings import EvalConfig
    from crosstune.recipe.schema import EvalSection

    section = EvalSection()
    assert SamplingParams() == SamplingParams(n=5, temperature=0.8, top_p=0.95, max_tokens=1024, seed=0)
    assert (section.samples, section.temperature, section.top_p, section.max_tokens) == (5, 0.8, 0.95, 1024)
    assert Timeouts() == Timeouts(section.connect_timeout_s, section.read_timeout_s, section.request_timeout_s)
    assert Timeouts() == Timeouts(10.0, 600.0, 1800.0)
    config = EvalConfig(problems=CHECKOUT, out=tmp_path, endpoint="http://x", model="m")
    assert (config.settings.ks, config.settings.prompt_style) == ((1, 5), section.prompt_style)
    assert (config.settings.sampling, config.settings.timeouts) == (SamplingParams(), Timeouts())
    options = inspect.signature(eval_command).parameters
    shown = {
        name: options[name].default.help.rsplit("else ", 1)[1]
        for name in ("n", "temperature", "top_p", "max_tokens", "connect_timeout", "read_timeout", "request_timeout")
    }
    assert shown == {
        "n": "5].",
        "temperature": "0.8].",
        "top_p": "0.95].",
        "max_tokens": "1024].",
        "connect_timeout": "10].",
        "read_timeout": "600].",
        "request_timeout": "1800].",
    }
