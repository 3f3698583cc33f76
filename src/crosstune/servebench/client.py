"""One streaming request to an OpenAI-compatible server, timed the way `vllm bench serve` times it.

st = just before the POST; TTFT = first SSE message with non-empty `choices` − st; ITL = gaps between successive
such messages (per chunk, not per token); E2EL = the last one − st; output tokens = usage.completion_tokens.
`stream_options.continuous_usage_stats` makes every chunk carry the running token count, so the client also knows
how many tokens each chunk held (a chunk is not a token). Every fault ends up in `error`, never as an exception:
an answer that is not what the API returns (`choices` not a list, `usage` not an object, a token count that is not
one, text that is not JSON) is `bad answer: …`, an error object in place of an answer (in the stream, or a 200 whose
body is one) `server error: <the server's own message>`. JSON is read by crosstune.untrusted_files, within bounds.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from crosstune.untrusted_files import UnreadableFile, parse_json


@dataclass
class RequestRecord:
    context_len: int
    concurrency: int | None
    request_rate: float | None
    index: int
    expected_prompt_tokens: int
    expected_output_tokens: int
    dispatch_s: float = 0.0  # st, relative to the cell's first dispatch
    ttft_s: float | None = None
    e2el_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)  # tokens carried by each content chunk
    prompt_tokens: int | None = None  # usage.prompt_tokens
    completion_tokens: int | None = None  # usage.completion_tokens
    finish_reason: str | None = None
    http_status: int | None = None
    error: str | None = None
    prompt_sha256: str | None = None  # the prompt's hash (16 hex digits): two sweeps' prompts told apart

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tpot_s(self) -> float | None:
        """(E2EL − TTFT) / (output tokens − 1), only with more than one output token (vLLM's definition)."""
        n = self.completion_tokens
        if not self.ok or n is None or n <= 1 or self.ttft_s is None or self.e2el_s is None:
            return None
        return (self.e2el_s - self.ttft_s) / (n - 1)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok, "tpot_s": self.tpot_s}


def completion_payload(model: str, prompt_ids: list[int], output_len: int) -> dict[str, Any]:
    """/v1/completions with the prompt as token ids (its length is exact) and an exact output length."""
    return {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": output_len,
        "min_tokens": output_len,
        "ignore_eos": True,  # without it a model may stop at EOS and the cell measures shorter outputs
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


def chat_payload(model: str, text: str, output_len: int) -> dict[str, Any]:
    body = completion_payload(model, [], output_len)
    del body["prompt"]
    body["messages"] = [{"role": "user", "content": text}]
    body["max_completion_tokens"] = body.pop("max_tokens")
    return body


async def send(
    client: httpx.AsyncClient, url: str, payload: dict[str, Any], record: RequestRecord, t0: float, timeout_s: float
) -> RequestRecord:
    """POST `payload` to `url`, stream the answer into `record` (times relative to `t0`, a time of the running event
    loop's clock: the clock the sweep's arrival schedule sleeps on, so one clock times both).

    `timeout_s` is a deadline for the whole exchange (connect, first byte, every chunk, [DONE]): a server that
    trickles a byte at a time is cut at the deadline too, not only one that falls silent. Whatever goes wrong inside
    the exchange fails this request with its reason; nothing escapes, and a record with an error is never `ok`."""
    st = asyncio.get_running_loop().time()
    record.dispatch_s = st - t0
    try:
        async with asyncio.timeout(timeout_s):
            await _exchange(client, url, payload, record, st, timeout_s)
    except TimeoutError:
        record.error = f"timeout: no complete answer within the {timeout_s:g} s deadline per request (--timeout)"
    except httpx.TimeoutException as e:  # httpx's own, per read: inside the deadline only on a loaded host
        record.error = f"timeout: {type(e).__name__} after {timeout_s:g} s"
    except httpx.ConnectError as e:
        record.error = f"refused: nothing accepted the connection to {url} ({e})"
    except httpx.HTTPError as e:
        record.error = f"dropped stream: {type(e).__name__}: {e}"
    except (BadAnswer, ServerError) as e:
        record.error = str(e)
    except Exception as e:  # anything else the answer caused: this request failed, the sweep goes on
        record.error = f"bad answer: {type(e).__name__}: {e}"
    return record


class BadAnswer(Exception):
    """An answer that is not what the API returns (not JSON, a field of the wrong type): `bad answer: why`."""

    def __init__(self, why: str):
        super().__init__(f"bad answer: {why}")


class ServerError(Exception):
    """An answer that is the server's error object: `server error: its message`."""

    def __init__(self, message: str):
        super().__init__(f"server error: {message}")


MAX_BODY = 64 * 1024  # bytes of a body that is not a stream kept to read the server's message from


def _snippet(text: str | bytes) -> str:
    text = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
    return repr(text[:200]) + ("…" if len(text) > 200 else "")


def _parsed(text: str | bytes, url: str) -> Any:
    """JSON from the endpoint through the one bounded reader (size, depth, digits, duplicate keys)."""
    try:
        return parse_json(text, url)
    except UnreadableFile as e:
        raise BadAnswer(f"{e.reason}: {_snippet(text)}") from None


def server_message(body: Any) -> str | None:
    """The message of an OpenAI-style error object (`{"error": {"message": ...}}`, or `{"error": "..."}`, or vLLM's
    `{"object": "error", "message": ...}`), one line; None when `body` is not one."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict):
        message = error.get("message")
    elif error is not None:
        message = error
    elif body.get("object") == "error":
        message = body.get("message")
    else:
        return None
    text = message if isinstance(message, str) else json.dumps(message if message is not None else error)
    return " ".join(text.split())[:500]


def _count(usage: dict, key: str) -> int | None:
    value = usage.get(key)
    if value is not None and (type(value) is not int or value < 0):
        raise BadAnswer(f"usage.{key} is {value!r}, not a count of tokens")
    return value


async def _exchange(
    client: httpx.AsyncClient, url: str, payload: dict[str, Any], record: RequestRecord, st: float, timeout_s: float
) -> None:
    clock = asyncio.get_running_loop().time
    last = st
    done = False
    tokens_so_far = 0
    other: list[str] = []  # what came that is not an SSE `data:` line: a body that is not a stream, kept in part
    async with client.stream("POST", url, json=payload, timeout=timeout_s) as r:
        record.http_status = r.status_code
        if r.status_code != 200:
            body = (await r.aread())[:MAX_BODY]
            try:
                said = server_message(parse_json(body, url))
            except UnreadableFile:
                said = None
            record.error = f"HTTP {r.status_code}: {said or body.decode(errors='replace')[:300]}"
            return
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                if sum(map(len, other)) < MAX_BODY:
                    other.append(line)
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                done = True
                break
            now = clock()
            msg = _parsed(data, url)
            if not isinstance(msg, dict):
                raise BadAnswer(f"an SSE message that is not a JSON object: {_snippet(data)}")
            if (said := server_message(msg)) is not None:
                raise ServerError(said)
            choices, usage = msg.get("choices"), msg.get("usage")
            if choices is not None and not isinstance(choices, list):
                raise BadAnswer(f"`choices` is {type(choices).__name__}, not a list: {_snippet(data)}")
            if usage is not None and not isinstance(usage, dict):
                raise BadAnswer(f"`usage` is {type(usage).__name__}, not an object: {_snippet(data)}")
            usage = usage or {}
            completion = _count(usage, "completion_tokens")
            if choices:
                choice = choices[0]
                if not isinstance(choice, dict):
                    raise BadAnswer(f"a choice that is not an object: {_snippet(data)}")
                if record.ttft_s is None:
                    record.ttft_s = now - st
                else:
                    record.itl_s.append(now - last)
                last = now
                finish = choice.get("finish_reason")
                if finish is not None and not isinstance(finish, str):
                    raise BadAnswer(f"finish_reason is {finish!r}, not text")
                record.finish_reason = finish or record.finish_reason
                if completion is not None:
                    if completion < tokens_so_far:
                        raise BadAnswer(f"usage.completion_tokens went down, from {tokens_so_far} to {completion}")
                    record.chunk_tokens.append(completion - tokens_so_far)
                    tokens_so_far = completion
            if usage:
                record.prompt_tokens = _count(usage, "prompt_tokens")
                record.completion_tokens = completion
    if not done and record.ttft_s is None and other:  # an answer that was never a stream: the server's error?
        body = "\n".join(other)
        try:
            said = server_message(parse_json(body, url))
        except UnreadableFile:
            said = None
        raise ServerError(said) if said is not None else BadAnswer(f"not an SSE stream: {_snippet(body)}")
    if record.ttft_s is not None:
        record.e2el_s = last - st
    record.error = _verdict(record, done)


def _verdict(record: RequestRecord, done: bool) -> str | None:
    """Why a finished stream doesn't count (None: it does)."""
    if not done:
        return "dropped stream: ended without [DONE]"
    if record.completion_tokens is None:
        return "no usage in the stream (the server ignored stream_options.include_usage)"
    if record.completion_tokens != record.expected_output_tokens:
        return (
            f"short completion: {record.completion_tokens} of {record.expected_output_tokens} output tokens "
            f"(finish_reason {record.finish_reason!r})"
        )
    if record.prompt_tokens is not None and record.prompt_tokens != record.expected_prompt_tokens:
        return (
            f"prompt length mismatch: {record.prompt_tokens} tokens on the server, "
            f"{record.expected_prompt_tokens} requested"
        )
    if record.ttft_s is None:
        return "no content chunk"
    return None
