"""Garbage from an endpoint is a failed request with its reason, never a half-filled `ok: true` record (the request
record is the one owner of whether a request counted): a stream chunk whose `choices` is not a list, whose `usage`
is not an object or whose token counts are not counts, text that is not JSON (or past the one reader's bounds), an
error object where an answer should be. A sweep where nothing succeeded exits 1 with the server's own message; "the
server stopped answering" only when it did."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from crosstune.servebench.client import RequestRecord, completion_payload, send
from crosstune.servebench.sweep import SweepConfig, run_sweep
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.serve import bench_args, cli, one_line_error

USAGE = {"prompt_tokens": 16, "completion_tokens": 1}
CHOICES = [{"index": 0, "text": "x", "finish_reason": None}]


def stream(*messages: object) -> tuple[str, bytes]:
    """An SSE body: each message (JSON of a dict, or text as it is) as a `data:` line, then [DONE]."""
    lines = [m if isinstance(m, str) else json.dumps(m) for m in messages]
    return "text/event-stream", "".join(f"data: {line}\n\n" for line in [*lines, "[DONE]"]).encode()


GARBAGE = {
    "choices a mapping": (
        stream({"choices": {"0": CHOICES[0]}, "usage": USAGE}),
        "bad answer: `choices` is dict, not a list",
    ),
    "choices a string": (stream({"choices": "xyz", "usage": USAGE}), "bad answer: `choices` is str, not a list"),
    "a choice a number": (stream({"choices": [5], "usage": USAGE}), "bad answer: a choice that is not an object"),
    "usage a list": (stream({"choices": CHOICES, "usage": [16, 1]}), "bad answer: `usage` is list, not an object"),
    "tokens a string": (
        stream({"choices": CHOICES, "usage": {**USAGE, "completion_tokens": "1"}}),
        "bad answer: usage.completion_tokens is '1', not a count of tokens",
    ),
    "tokens a float": (
        stream({"choices": CHOICES, "usage": {**USAGE, "completion_tokens": 1.5}}),
        "bad answer: usage.completion_tokens is 1.5, not a count of tokens",
    ),
    "prompt tokens negative": (
        stream({"choices": CHOICES, "usage": {**USAGE, "prompt_tokens": -16}}),
        "bad answer: usage.prompt_tokens is -16, not a count of tokens",
    ),
    "tokens going down": (
        stream({"choices": CHOICES, "usage": {**USAGE, "completion_tokens": 3}}, {"choices": CHOICES, "usage": USAGE}),
        "bad answer: usage.completion_tokens went down, from 3 to 1",
    ),
    "finish reason a number": (
        stream({"choices": [{"text": "x", "finish_reason": 7}], "usage": USAGE}),
        "bad answer: finish_reason is 7, not text",
    ),
    "not JSON": (stream("{not json"), "bad answer: not valid JSON: Expecting property name enclosed in double quotes"),
    "a list": (stream("[1, 2]"), "bad answer: an SSE message that is not a JSON object: '[1, 2]'"),
    "nested 5,000 deep": (stream("[" * 5000 + "]" * 5000), "bad answer: nested deeper than 100 levels"),
    "an error in the stream": (
        stream({"error": {"message": "KV cache\nexhausted", "code": 500}}),
        "server error: KV cache exhausted",
    ),
    "a 200 whose body is an error": (
        ("application/json", json.dumps({"error": {"message": "model overloaded", "type": "Overloaded"}}).encode()),
        "server error: model overloaded",
    ),
    "a 200 with vLLM's error object": (
        ("application/json", json.dumps({"object": "error", "message": "The model `x` does not exist."}).encode()),
        "server error: The model `x` does not exist.",
    ),
    "a 200 with a proxy's page": (
        ("text/html", b"<html>hello</html>"),
        "bad answer: not an SSE stream: '<html>hello</html>'",
    ),
}


def _sent(server: FakeOpenAI) -> RequestRecord:
    record = RequestRecord(16, 1, None, 0, 16, 1)

    async def one() -> RequestRecord:
        async with httpx.AsyncClient() as client:
            payload = completion_payload("raw", list(range(16)), 1)
            return await send(
                client, server.url + "/v1/completions", payload, record, asyncio.get_running_loop().time(), 10.0
            )

    return asyncio.run(one())


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_garbage_fails_the_request_with_its_reason(kind):
    answer, reason = GARBAGE[kind]
    with FakeOpenAI(raw=answer) as server:
        record = _sent(server)
    assert record.error is not None and record.error.startswith(reason), record.error
    assert record.to_json()["ok"] is False and record.tpot_s is None


def test_the_fake_s_well_formed_stream_still_succeeds():
    """The checks refuse garbage only: the same exchange with a well-formed one-token answer is ok."""
    with FakeOpenAI(raw=stream({"choices": [{"text": "x", "finish_reason": "length"}], "usage": USAGE})) as server:
        record = _sent(server)
    assert record.ok and record.completion_tokens == 1 and record.ttft_s is not None


def test_a_sweep_of_garbage_exits_1_with_the_reason_and_writes_nothing(tmp_path, tiny_gemma4_dir):
    """It exited 0 at 0 tok/s with `ok: true, error: null` records: `choices` a mapping raised inside the exchange."""
    answer = stream({"choices": {"0": CHOICES[0]}, "usage": USAGE})
    with FakeOpenAI(raw=answer) as server:
        line = one_line_error(cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(tmp_path / "b"), model="raw")))
    assert "no successful request: 2 × bad answer (first: bad answer: `choices` is dict, not a list" in line
    assert not (tmp_path / "b").exists()


def test_a_server_error_is_shown_in_its_words_and_a_healthy_server_is_not_said_to_have_stopped(
    tmp_path, tiny_gemma4_dir
):
    """An HTTP 200 whose body is an error was "the server stopped answering", without the server's message, when
    /health was not 200 (a server without that route); a server that answers is not gone, whatever its requests got."""
    body = json.dumps({"error": {"message": "model overloaded, retry later"}}).encode()
    cfg = SweepConfig(
        endpoint="", model="raw", tokenizer=tiny_gemma4_dir, contexts=[16, 32], output_len=8, num_requests=2, warmup=0
    )
    with FakeOpenAI(raw=("application/json", body), health_status=404) as server:
        cfg.endpoint = server.url
        summary = asyncio.run(run_sweep(cfg, tmp_path / "sweep"))
        line = one_line_error(cli(*bench_args(server.url, tiny_gemma4_dir, "--out", str(tmp_path / "b"), model="raw")))
    assert summary["aborted"] is None and [c["failures"] for c in summary["cells"]] == [{"server error": 2}] * 2
    assert summary["cells"][0]["first_error"] == "server error: model overloaded, retry later"
    records = [json.loads(r) for r in (tmp_path / "sweep" / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 4 and not any(r["ok"] for r in records)
    assert "2 × server error (first: server error: model overloaded, retry later)" in line
    assert "stopped answering" not in line
