"""Completion generation: the OpenAI-compatible client against a fake server, the resumable cache, and
the in-process transformers backend on a tiny local model."""

from __future__ import annotations

import pytest

from crosstune.evals.generation.cache import CompletionCache, SamplingParams, load_samples_file
from crosstune.evals.generation.endpoint import EndpointGenerator, Timeouts
from crosstune.evals.generation.generate import generate_completions
from crosstune.evals.problems.prompt_styles import build_messages
from tests.helpers.evals import PROBLEMS, echo_answer, tiny_local_model
from tests.helpers.fake_openai import FakeOpenAI


def fake_server(fail_after: int | None = None, status: int = 500) -> FakeOpenAI:
    """The fake server answering each request with echo_answer; past `fail_after` requests, HTTP `status`."""
    overloaded = '{"error": "overloaded"}'
    return FakeOpenAI(answer=echo_answer, fail_after=fail_after, error_status=status, error_body=overloaded)


def backend(url: str) -> EndpointGenerator:
    return EndpointGenerator(url, "fake-model", retries=1, backoff_s=0.01, timeouts=Timeouts(10, 10, 10))


def asked(server: FakeOpenAI) -> set[tuple[int, int]]:
    """(prompt length, seed) of every request: identifies problem and sample."""
    return {(len(r["messages"][-1]["content"]), r["seed"]) for r in server.requests}


def test_request_payload_and_results(tmp_path):
    params = SamplingParams(n=2, temperature=0.8, top_p=0.95, max_tokens=64, seed=100)
    with fake_server() as server:
        out = generate_completions(PROBLEMS[:2], backend(server.url), params, CompletionCache(tmp_path / "c.jsonl"))
        out = out.completions
    assert len(server.requests) == 4 and set(server.paths) == {"/v1/chat/completions"}
    first = server.requests[0]
    assert (first["model"], first["temperature"], first["top_p"], first["max_tokens"], first["n"]) == (
        "fake-model",
        0.8,
        0.95,
        64,
        1,
    )
    assert first["messages"][0]["role"] == "system"
    assert sorted(r["seed"] for r in server.requests) == [100, 100, 101, 101]
    assert [len(v) for v in out.values()] == [2, 2] and "seed 101" in out["Prob001_zero"][1]


def test_server_failure_midway_then_resume_asks_only_missing(tmp_path):
    cache_path = tmp_path / "completions.jsonl"
    params = SamplingParams(n=3, temperature=0.8, top_p=0.95)
    with fake_server(fail_after=5) as failing:
        failed = generate_completions(
            PROBLEMS, backend(failing.url), params, CompletionCache(cache_path), concurrency=4
        )
    assert len(failed.failures) == 12 - 5 and sum(v.count(None) for v in failed.completions.values()) == 7
    assert len(CompletionCache(cache_path)) == 5  # what succeeded is on disk
    done_first = {(len(r["messages"][-1]["content"]), r["seed"]) for r in failing.requests[:5]}
    with fake_server() as healthy:
        resumed = generate_completions(
            PROBLEMS, backend(healthy.url), params, CompletionCache(cache_path), concurrency=4
        )
    out = resumed.completions
    assert resumed.failures == []
    assert len(healthy.requests) == 4 * 3 - 5
    assert asked(healthy).isdisjoint(done_first)
    assert sum(len(v) for v in out.values()) == 12
    with fake_server() as idle:  # everything cached now: nothing is asked
        again = generate_completions(PROBLEMS, backend(idle.url), params, CompletionCache(cache_path))
    assert idle.requests == [] and again.completions == out


def test_keyboard_interrupt_keeps_finished_samples(tmp_path):
    cache_path = tmp_path / "completions.jsonl"
    params = SamplingParams(n=2)

    def interrupt_after_three(done: int, total: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with fake_server() as server:
        with pytest.raises(KeyboardInterrupt):
            generate_completions(
                PROBLEMS,
                backend(server.url),
                params,
                CompletionCache(cache_path),
                concurrency=1,
                on_progress=interrupt_after_three,
            )
    assert len(CompletionCache(cache_path)) == 3
    with fake_server() as server:
        generate_completions(PROBLEMS, backend(server.url), params, CompletionCache(cache_path))
    assert len(server.requests) == 8 - 3


def test_cache_key_covers_sampling_params_but_not_n(tmp_path):
    cache = CompletionCache(tmp_path / "c.jsonl")
    with fake_server() as server:
        generate_completions(PROBLEMS[:1], backend(server.url), SamplingParams(n=2), cache)
        generate_completions(PROBLEMS[:1], backend(server.url), SamplingParams(n=3), cache)  # reuses 0 and 1
        assert len(server.requests) == 3
        generate_completions(PROBLEMS[:1], backend(server.url), SamplingParams(n=1, temperature=0.5), cache)
        assert len(server.requests) == 4
        generate_completions(PROBLEMS[:1], backend(server.url), SamplingParams(n=1), cache, prompt_style="codev")
        assert len(server.requests) == 5


def test_torn_last_line_is_ignored_and_file_doubles_as_samples_file(tmp_path):
    path = tmp_path / "c.jsonl"
    with fake_server() as server:
        generate_completions(PROBLEMS[:2], backend(server.url), SamplingParams(n=2), CompletionCache(path))
    with path.open("a") as f:
        f.write('{"key": "torn", "completion": "half')
    assert len(CompletionCache(path)) == 4
    path.write_text("\n".join(path.read_text().splitlines()[:-1]) + "\n")
    samples = load_samples_file(path)
    assert sorted(samples) == ["Prob001_zero", "Prob002_and2"] and all(len(v) == 2 for v in samples.values())
    assert "seed 1" in samples["Prob001_zero"][1]


def test_client_errors_are_not_retried(tmp_path):
    with fake_server(fail_after=0, status=400) as server:
        result = generate_completions(
            PROBLEMS[:1], backend(server.url), SamplingParams(n=1), CompletionCache(tmp_path / "c")
        )
    assert len(server.requests) == 1 and [f.reason for f in result.failures] == ['HTTP 400: {"error": "overloaded"}']
    with fake_server(fail_after=0, status=503) as server:
        result = generate_completions(
            PROBLEMS[:1], backend(server.url), SamplingParams(n=1), CompletionCache(tmp_path / "d")
        )
    assert len(server.requests) == 2  # one retry
    assert [f.reason for f in result.failures] == ['HTTP 503: {"error": "overloaded"} (after 2 attempts)']


def test_transformers_backend_samples_reproducibly(tmp_path):
    from crosstune.evals.generation.local import TransformersGenerator

    model = TransformersGenerator(tiny_local_model(tmp_path / "tiny"))
    params = SamplingParams(n=2, temperature=1.0, top_p=1.0, max_tokens=6, seed=3)
    cache = CompletionCache(tmp_path / "c.jsonl")
    first = generate_completions(PROBLEMS[:1], model, params, cache).completions["Prob001_zero"]
    assert len(first) == 2 and all(isinstance(t, str) and t for t in first) and len(cache) == 2
    messages = build_messages(PROBLEMS[0])
    assert [model.complete(messages, params, i).text for i in range(2)] == first  # same seed, same text


class InstantTrouble:
    """A backend whose every request fails at once with endpoint trouble: the worker thread could loop through all
    jobs before the main thread reads the first failure (the race that sent a 4th request under load)."""

    model, max_concurrency, batch_size, engine = "m", 1, 1, {"name": "fake", "kind": "endpoint"}
    identity = {"served": "m"}

    def __init__(self):
        self.calls = 0

    def complete(self, messages, params, sample):
        from crosstune.evals.generation.generate import GenerationError

        self.calls += 1
        raise GenerationError("server error: 500", endpoint_trouble=True)

    def probe(self):
        pass

    def cancel(self):
        pass


@pytest.mark.parametrize("attempt", range(5))
def test_no_request_is_sent_after_the_failures_in_a_row_that_give_up(tmp_path, attempt):
    backend = InstantTrouble()
    result = generate_completions(
        PROBLEMS[:2], backend, SamplingParams(n=10), CompletionCache(tmp_path / "c"), concurrency=1
    )
    assert backend.calls == 3  # give up after max(3, workers) = 3 in a row: the 4th is never sent
    assert len(result.failures) == 20
