"""An endpoint or a samples file that gives the wrong types: a completion that is not text is a failed sample with
its reason and never reaches the cache (so a rerun against a healthy server asks again); a samples-file row with a
non-string completion or a non-integer sample is refused in one line naming the file and the line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from crosstune.evals.generation.cache import CompletionCache, SamplingParams, load_samples_file
from crosstune.evals.generation.endpoint import EndpointGenerator
from crosstune.evals.generation.generate import generate_completions
from crosstune.evals.problems.problem_sets import load_problems
from tests.helpers.evals import make_app
from tests.helpers.fake_openai import GOOD_DESIGN, FakeOpenAI
from tests.helpers.paths import FIXTURES

CHECKOUT = FIXTURES / "verilogeval"
PROBLEM = load_problems(CHECKOUT, patterns=["Prob002_and2"])
MESSAGES = [  # what a broken server answers, and the reason the sample fails with
    ({"role": "assistant", "content": 5}, "the answer's message content is int, not text"),
    ({"role": "assistant", "content": {"text": "module"}}, "the answer's message content is dict, not text"),
    ({"role": "assistant", "content": ["a"]}, "the answer's message content is list, not text"),
    ({"role": "assistant", "content": None}, "the answer's message content is null (no text, no reasoning)"),
    ({"role": "assistant", "content": "x", "reasoning_content": 3}, "the answer's message reasoning is int, not text"),
]


@pytest.mark.parametrize(("message", "reason"), MESSAGES, ids=[str(m["content"]) for m, _ in MESSAGES])
def test_a_completion_that_is_not_text_fails_its_sample_and_is_never_cached(tmp_path, message, reason):
    cache_path = tmp_path / "cache.jsonl"
    with FakeOpenAI(answer=lambda body: message, served=["m"]) as broken:
        result = generate_completions(
            PROBLEM, EndpointGenerator(broken.url, "m", retries=0), SamplingParams(n=2), CompletionCache(cache_path)
        )
    assert result.completions["Prob002_and2"] == [None, None]
    assert [f.reason.split(":")[0] for f in result.failures] == [reason.split(":")[0]] * 2
    assert all(f.reason.startswith(reason) for f in result.failures), result.failures
    assert not cache_path.exists() or len(CompletionCache(cache_path)) == 0
    with FakeOpenAI(served=["m"]) as healthy:  # the rerun asks again and gets the answers
        again = generate_completions(
            PROBLEM, EndpointGenerator(healthy.url, "m", retries=0), SamplingParams(n=2), CompletionCache(cache_path)
        )
    assert again.completions["Prob002_and2"] == [GOOD_DESIGN, GOOD_DESIGN] and again.from_cache == 0


def test_a_cache_poisoned_by_an_older_crosstune_is_asked_again(tmp_path):
    """Caches written before the check hold numbers as completions: such a record is not an answer."""
    cache_path = tmp_path / "cache.jsonl"
    cache_path.write_text(
        json.dumps({"key": "k1", "completion": 5})
        + "\n"
        + json.dumps({"key": "k2", "completion": "module m; endmodule"})
        + "\n"
    )
    cache = CompletionCache(cache_path)
    assert (cache.get("k1"), cache.get("k2")["completion"], len(cache)) == (None, "module m; endmodule", 1)


ROWS = [  # (a samples-file row, what the one line says after FILE:2:)
    ({"problem": "Prob002_and2", "completion": 5}, "completion must be a string, not 5"),
    ({"problem": "Prob002_and2", "completion": {"a": 1}}, 'completion must be a string, not {"a": 1}'),
    ({"problem": "Prob002_and2", "completion": None}, "completion must be a string, not null"),
    ({"problem": "Prob002_and2", "completion": "x", "sample": "1"}, 'sample must be an integer >= 0, not "1"'),
    ({"problem": "Prob002_and2", "completion": "x", "sample": 1.5}, "sample must be an integer >= 0, not 1.5"),
    ({"problem": "Prob002_and2", "completion": "x", "sample": True}, "sample must be an integer >= 0, not true"),
    ({"problem": "Prob002_and2", "completion": "x", "sample": -1}, "sample must be an integer >= 0, not -1"),
    ({"problem": ["Prob002_and2"], "completion": "x"}, 'problem must be a string, not ["Prob002_and2"]'),
]


@pytest.mark.parametrize(("row", "message"), ROWS, ids=[json.dumps(r)[-30:] for r, _ in ROWS])
def test_a_samples_file_row_of_the_wrong_type_is_one_line_naming_the_file_and_line(tmp_path, row, message):
    samples = tmp_path / "samples.jsonl"
    good = {"problem": "Prob002_and2", "completion": "x", "sample": 0}
    samples.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(ValueError) as refused:
        load_samples_file(samples)
    assert str(refused.value) == f"{samples}:2: {message}: fix or drop that line"
    out = tmp_path / "out"
    args = [
        "eval",
        "--problems",
        str(CHECKOUT),
        "--problem",
        "Prob002_and2",
        "--samples-file",
        str(samples),
        "--out",
        str(out),
    ]
    result = CliRunner(env={"COLUMNS": "400"}).invoke(make_app(), args, catch_exceptions=False)
    assert result.exit_code == 1 and "\n" not in result.output.strip(), result.output
    assert f"{samples}:2: {message}" in result.output
    assert not out.exists() or list(out.iterdir()) == []
