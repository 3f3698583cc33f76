"""The eval client against a misbehaving server: deadlines, a fast failure when nothing listens, a recorded
outcome for every sample, Ctrl-C that keeps what finished, and a report written despite failed samples."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crosstune.evals.generation.cache import CompletionCache, SamplingParams
from crosstune.evals.generation.endpoint import EndpointGenerator, EndpointUnreachable, Timeouts
from crosstune.evals.generation.generate import generate_completions
from crosstune.evals.problems.problem_sets import load_problems
from tests.helpers.evals import eval_server
from tests.helpers.fake_openai import ERROR_BODY
from tests.helpers.paths import FIXTURES, REPO
from tests.helpers.ports import free_port
from tests.helpers.processes import default_sigint

CHECKOUT = FIXTURES / "verilogeval"
PROBLEM = load_problems(CHECKOUT, patterns=["Prob002_and2"])
SHORT = Timeouts(connect_s=1.0, read_s=0.5, request_s=1.0)  # short limits keep each test around a second
needs_iverilog = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs iverilog (make setup)")


def backend(url: str, timeouts: Timeouts = SHORT) -> EndpointGenerator:
    return EndpointGenerator(url, "m", timeouts=timeouts, retries=1, backoff_s=0.01)


def test_every_sample_gets_its_outcome_and_reason(tmp_path):
    modes = ["ok", "error", "stall", "trickle", "cut"]  # sample i (seed i) meets modes[i]
    cache = CompletionCache(tmp_path / "c.jsonl")
    with eval_server(lambda seed: modes[seed]) as server:
        start = time.monotonic()
        result = generate_completions(PROBLEM, backend(server.url), SamplingParams(n=5), cache, concurrency=5)
        elapsed = time.monotonic() - start
    assert elapsed < 4  # the stall and the trickle end at their deadlines (0.5 s, 1 s), not never
    assert result.completions["Prob002_and2"][0].startswith("[BEGIN]")
    assert result.completions["Prob002_and2"][1:] == [None] * 4
    reasons = {f.sample: f.reason for f in result.failures}
    assert reasons[1] == f"HTTP 500: {ERROR_BODY[:500]} … (after 2 attempts)"  # 5xx retried once, body quoted
    assert reasons[2] == "read timeout: the server sent nothing for 0.5 s"  # not retried
    assert reasons[3] == "no complete answer within the request timeout (1 s)"  # however the bytes trickle
    assert reasons[4] == "response cut short: received 10 of 1000 bytes of the body (IncompleteRead) (after 2 attempts)"
    assert sorted(server.seeds) == [0, 1, 1, 2, 3, 4, 4]
    assert len(CompletionCache(tmp_path / "c.jsonl")) == 1  # only the success is cached: a rerun retries the rest


def test_nothing_listening_fails_fast_naming_the_url(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(EndpointUnreachable) as error:
        generate_completions(PROBLEM, EndpointGenerator(url, "m"), SamplingParams(n=5), CompletionCache(tmp_path / "c"))
    assert time.monotonic() - start < 2  # default timeouts and retries: the probe alone decides
    assert f"{url}/v1/models: cannot connect" in str(error.value) and "Nothing was sent" in str(error.value)


def test_a_server_that_never_answers_the_probe_fails_within_the_connect_timeout(tmp_path):
    with eval_server(models_stall=True) as server:
        start = time.monotonic()
        with pytest.raises(
            EndpointUnreachable,
            match=rf"{server.url}/v1/models: no complete answer within the connect timeout \(0.5 s\)",
        ):
            generate_completions(
                PROBLEM, backend(server.url, Timeouts(connect_s=0.5)), SamplingParams(), CompletionCache(tmp_path / "c")
            )
        assert time.monotonic() - start < 2 and server.seeds == []


def test_probe_names_the_served_models(tmp_path):
    with eval_server(served=("gemma-lora", "gemma")) as server:
        with pytest.raises(EndpointUnreachable, match=r"serves \['gemma-lora', 'gemma'\], not 'm'"):
            generate_completions(PROBLEM, backend(server.url), SamplingParams(), CompletionCache(tmp_path / "c"))
        assert server.seeds == []


def test_a_stalled_endpoint_is_given_up_after_failures_in_a_row(tmp_path):
    with eval_server(lambda seed: "stall") as server:
        start = time.monotonic()
        result = generate_completions(
            PROBLEM,
            backend(server.url, Timeouts(read_s=0.3)),
            SamplingParams(n=6),
            CompletionCache(tmp_path / "c"),
            concurrency=1,
        )
    assert time.monotonic() - start < 3  # three 0.3 s timeouts, then the rest is not sent
    assert len(server.seeds) == 3
    reasons = [f.reason for f in result.failures]
    assert reasons[:3] == ["read timeout: the server sent nothing for 0.3 s"] * 3
    assert (
        reasons[3:]
        == [
            "not completed: the endpoint failed 3 samples in a row (last: read timeout: the server "
            "sent nothing for 0.3 s)"
        ]
        * 3
    )


def eval_argv(url: str, out: Path, *extra: str) -> list[str]:
    return [
        "--problems",
        str(CHECKOUT),
        "--problem",
        "Prob002_and2",
        "--endpoint",
        url,
        "--model",
        "m",
        "--out",
        str(out),
        *extra,
    ]


def test_ctrl_c_stops_promptly_and_says_what_was_kept(tmp_path):
    # COLUMNS: no wrapped paths; PYTHONFAULTHANDLER: a child that hangs prints its threads' stacks on SIGABRT.
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "COLUMNS": "500",
        "PYTHONFAULTHANDLER": "1",
    }
    code = "import sys; from crosstune.cli import main; sys.argv[0] = 'crosstune'; main()"
    with eval_server(lambda seed: "ok" if seed == 0 else "stall") as server:
        argv = eval_argv(server.url, tmp_path, "--n", "3", "--concurrency", "1")
        process = subprocess.Popen(
            [sys.executable, "-c", code, "eval", *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=default_sigint,
        )
        try:
            server.wait_for_requests(2)  # sample 0 answered, sample 1 hangs (default timeouts: minutes)
            time.sleep(0.3)
            process.send_signal(signal.SIGINT)
            start = time.monotonic()
            try:
                output, _ = process.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGABRT)
                pytest.fail("no exit 5 s after Ctrl-C; the child's stacks:\n" + process.communicate(timeout=10)[0])
        finally:
            process.kill()
        assert time.monotonic() - start < 5
    assert process.returncode == 130, output
    assert f"1 of 3 samples are kept in {tmp_path / 'completions.jsonl'}" in " ".join(output.split())
    assert "Run the same command again to resume" in output
    assert len(CompletionCache(tmp_path / "completions.jsonl")) == 1


@needs_iverilog
def test_report_is_written_with_failed_samples_counted_and_listed(tmp_path):
    from tests.helpers.evals import run

    with eval_server(lambda seed: {0: "ok", 1: "error", 2: "cut"}[seed]) as server:
        result = run(*eval_argv(server.url, tmp_path, "--n", "3", "--k", "1,2", "--retries", "0"))
    assert result.exit_code == 3, result.output  # the report is written, and the exit status says it is partial
    summary = json.loads((tmp_path / "summary.json").read_text())
    generation = summary["generation"]
    assert (generation["requested"], generation["completed"], generation["failed"]) == (3, 1, 2)
    assert [(f["sample"], f["reason"][:13]) for f in generation["failed_samples"]] == [
        (1, 'HTTP 500: {"e'),
        (2, "response cut "),
    ]
    row = summary["per_problem"][0]
    assert (row["n"], row["passed"], row["failed"], row["codes"]) == (1, 1, 2, ".")
    assert summary["pass_at_k"] == {"1": 1.0, "2": None}  # over what completed: 1 sample, too few for k = 2
    assert summary["pass_at_k_problems"] == {"1": 1, "2": 0}
    markdown = (tmp_path / "summary.md").read_text()
    assert "**generation: 2 of 3 samples failed**" in markdown and "| Prob002_and2 | 2 | response cut" in markdown
    records = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [(r["sample"], r["generation"], r["verdict"]) for r in records] == [
        (0, "ok", "."),
        (1, "failed", None),
        (2, "failed", None),
    ]
    assert "2 of 3 samples failed to generate" in result.output and "KV cache exhausted" in result.output


@needs_iverilog
def test_recipe_gives_the_request_timeouts(tmp_path):
    from tests.helpers.evals import run

    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: r\nmodel: {family: gemma4, size: tiny}\ndata: {sources: [{path: x.jsonl}]}\n"
        f"eval: {{problems: {CHECKOUT}, samples: 1, k: [1], read_timeout_s: 0.4}}\n"
    )
    with eval_server(lambda seed: "stall") as server:
        start = time.monotonic()
        result = run(str(recipe), *eval_argv(server.url, tmp_path / "o"))
        assert time.monotonic() - start < 4
    assert result.exit_code == 3, result.output
    reason = json.loads((tmp_path / "o" / "summary.json").read_text())["generation"]["failed_samples"][0]["reason"]
    assert reason == "read timeout: the server sent nothing for 0.4 s"
