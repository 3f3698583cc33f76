"""One streaming request to an OpenAI-compatible server, timed the way `vllm bench serve` times it.

st = just before the POST; TTFT = first SSE message with non-empty `choices` − st; ITL = gaps between successive
such messages (per chunk, not per token); E2EL = the last one − st; output tokens = usage.completion_tokens.
`stream_options.continuous_usage_stats` makes every chunk carry the running token count, so the client also knows
how many tokens each chunk held (a chunk is not a token). Every fault ends up in `error`, never as an exception.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx


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
    """POST `payload` to `url`, stream the answer into `record` (times relative to `t0`, a perf_counter).

    `timeout_s` is a deadline for the whole exchange (connect, first byte, every chunk, [DONE]): a server that
    trickles a byte at a time is cut at the deadline too, not only one that falls silent."""
    st = time.perf_counter()
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
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        record.error = f"dropped stream: {type(e).__name__}: {e}"
    return record


async def _exchange(
    client: httpx.AsyncClient, url: str, payload: dict[str, Any], record: RequestRecord, st: float, timeout_s: float
) -> None:
    last = st
    done = False
    tokens_so_far = 0
    async with client.stream("POST", url, json=payload, timeout=timeout_s) as r:
        record.http_status = r.status_code
        if r.status_code != 200:
            body = (await r.aread()).decode(errors="replace")[:300]
            record.error = f"HTTP {r.status_code}: {body}"
            return
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                done = True
                break
            now = time.perf_counter()
            msg = json.loads(data)
            if not isinstance(msg, dict):
                raise json.JSONDecodeError("an SSE message that is not a JSON object", data, 0)
            usage = msg.get("usage")
            if msg.get("choices"):
                if record.ttft_s is None:
                    record.ttft_s = now - st
                else:
                    record.itl_s.append(now - last)
                last = now
                choice = msg["choices"][0]
                record.finish_reason = choice.get("finish_reason") or record.finish_reason
                if usage and usage.get("completion_tokens") is not None:
                    record.chunk_tokens.append(usage["completion_tokens"] - tokens_so_far)
                    tokens_so_far = usage["completion_tokens"]
            if usage:
                record.prompt_tokens = usage.get("prompt_tokens")
                record.completion_tokens = usage.get("completion_tokens")
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
