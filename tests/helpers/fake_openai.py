"""The one OpenAI-compatible server of the tests, on 127.0.0.1, with scripted faults: the serving bench's client talks
to it (streamed /v1/completions and /v1/chat/completions), the eval client too (answers in one JSON body), and so do
the stand-in `vllm` executable (tests/helpers/fake_vllm.py runs it in its own process) and a stranger on its port.

What a request meets is its mode: `mode(body)` when given, else the request's `model` when it names a mode, else
"ok"; requests after the first `fail_after` meet "error".
- Streamed (`"stream": true`): ok, burst (2 tokens per chunk), noeos (stops at "EOS" after 3 tokens unless
  ignore_eos), short (one token short), cut (drops the connection after two chunks), error (HTTP `error_status`),
  stall (sleeps `stall_s` before the first chunk), truncate (the prompt is cut to 64 tokens, as an over-long prompt
  would be), trickle (one SSE comment byte every 50 ms, never an answer, for up to `stall_s`), flush (every chunk in
  one write, as a loaded vLLM flushes a whole stream), raw (HTTP 200 with `raw`: its content type and body, for
  garbage a client must survive); with `stall_prompts_over`, longer prompts stall like `stall`.
- In one body: ok (`answer`: a text, or a function of the request giving the text or the whole chat message, as a
  reasoning parser splits it), error (HTTP `error_status` with `error_body`), stall (no answer for `stall_s`),
  trickle (Content-Length 1000, then one body byte every 0.2 s for up to `stall_s`), cut (Content-Length 1000,
  10 bytes, then close), die (the serving process exits 0 at once, as vLLM's CPU engine does on a head size it can't
  run: the stand-in's mode).
Load and cache: `events` logs ("start", n) when the body of the n-th request is read and ("end", n) before the last
byte of its answer is written, so a client that has read a whole answer finds the server done with it; `in_flight` and
`max_in_flight` count the same way. With `hold_first_until` N, the first streamed request's answer waits (after its
headers) until the N-th request has arrived (or the server stops): what a client sends meanwhile is its concurrency,
in events, not in timings. A prefix cache of `block` -token blocks (vLLM's
hashing: a block counts only with every block before it) counts prompt tokens queried and hit, as vLLM's
`vllm:prefix_cache_queries` / `vllm:prefix_cache_hits` token counters.
Speculative decoding: with `draft=[p0, p1, …]` (the acceptance per draft position, k = its length) the server
counts vLLM's spec_decode counters for every streamed token as an engine with that acceptance would: a request of n
tokens takes n / (1 + Σp) drafting steps of k proposed tokens, p_i of them accepted at position i.
GET /health answers `health_status` (200); /metrics a vLLM-like TTFT histogram and the prefix-cache counters;
/version `version` when given; /v1/models lists `served` (each card with `max_model_len`, vLLM's `root` (the folder
it serves) and `owned_by` when given) or stalls with `models_stall`, and answers 404 without `served`. `die_after`
stops the whole server after that many requests.
As a stand-in hub endpoint (HF_ENDPOINT), GET /api/models/<id>/... and /api/datasets/<id>/... answer a repo named in
`hub_errors` with the hub's refusal for its code (401 with X-Error-Code GatedRepo, 404 with RepoNotFound), as
huggingface_hub reads them; every other path 404.
With `raw` (bytes, or (content type, bytes)), every POST is answered 200 with those bytes as they are: garbage a
client must survive (the bench's tests, the fuzzer).
Every connection carries one request (HTTP/1.0: a stream ends when the socket closes).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ERROR_BODY = json.dumps({"error": {"message": "KV cache exhausted " + "x" * 600, "code": 500}})
GOOD_DESIGN = "[BEGIN]\nmodule TopModule(input a, input b, output out);\n  assign out = a & b;\nendmodule\n[DONE]"
ANSWER_TOKENS = 5  # usage.completion_tokens of an answer in one body (fewer when max_tokens asks for fewer)
MODES = {"ok", "burst", "noeos", "short", "cut", "error", "stall", "truncate", "trickle", "flush", "die", "raw"}


class FakeOpenAI(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        port: int = 0,
        mode: Callable[[dict], str] | None = None,
        fail_after: int | None = None,
        answer: str | Callable[[dict], str | dict] = GOOD_DESIGN,
        finish_reason: str = "stop",
        error_status: int = 500,
        error_body: str = ERROR_BODY,
        token_delay_s: float = 0.002,
        hold_first_until: int | None = None,
        die_after: int | None = None,
        served: list[str] | tuple[str, ...] | None = None,
        max_model_len: int | None = None,
        root: str | None = None,
        models_stall: bool = False,
        owned_by: str | None = None,
        version: str | None = None,
        stall_s: float = 3.0,
        stall_prompts_over: int | None = None,
        block: int = 16,
        hub_errors: dict[str, str] | None = None,
        draft: list[float] | None = None,
        raw: bytes | tuple[str, bytes] | None = None,
        health_status: int = 200,
    ):
        super().__init__(("127.0.0.1", port), Handler)
        self.mode, self.fail_after, self.answer, self.finish_reason = mode, fail_after, answer, finish_reason
        self.owned_by, self.version = owned_by, version
        self.error_status, self.error_body = error_status, error_body
        self.token_delay_s, self.die_after = token_delay_s, die_after
        self.hold_first_until = hold_first_until
        self.held = threading.Event()  # set when request hold_first_until arrives, or on stop: the first one answers
        self.served, self.max_model_len, self.root, self.models_stall = served, max_model_len, root, models_stall
        self.stall_s, self.stall_prompts_over = stall_s, stall_prompts_over
        self.block = block
        self.hub_errors = hub_errors or {}
        self.draft = draft
        self.spec = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "per_pos": [0.0] * len(draft or [])}
        self.raw, self.health_status = raw, health_status
        self.cached_blocks: set[tuple] = set()
        self.cache_queries = self.cache_hits = 0
        self.release = threading.Event()  # set on stop: stalled and trickling handlers end
        self.lock = threading.Lock()
        self.requests: list[dict] = []  # bodies received, in arrival order
        self.paths: list[str] = []  # their paths
        self.in_flight = self.max_in_flight = 0
        self.events: list[tuple[str, int]] = []  # ("start", n) and ("end", n), in the order they happened
        self.ttft_sum = self.ttft_count = 0.0
        self.chat_tokens = lambda text: 7  # usage.prompt_tokens for a chat request (tests plug in the template)
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up: expected in fault tests
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def seeds(self) -> list[int | None]:
        """The seed of every request, in arrival order (the eval client's seed is sample index + base seed)."""
        return [body.get("seed") for body in self.requests]

    def wait_for_requests(self, count: int, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.requests) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server saw {len(self.requests)} requests, expected {count}")
            time.sleep(0.02)

    def mode_of(self, body: dict, n_seen: int) -> str:
        if self.fail_after is not None and n_seen > self.fail_after:
            return "error"
        if self.mode is not None:
            return self.mode(body)
        return body.get("model") if body.get("model") in MODES else "ok"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.release.set()
        self.held.set()
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # close-delimited bodies: the stream ends when the socket closes
    server: FakeOpenAI

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        s = self.server
        if self.path == "/health":
            self._send(s.health_status, "")
        elif self.path == "/v1/models" and s.models_stall:
            s.release.wait(s.stall_s)
        elif self.path == "/v1/models" and s.served is not None:
            extra = {**({"root": s.root} if s.root else {}), **({"owned_by": s.owned_by} if s.owned_by else {})}
            cards = [{"id": m, "object": "model", "max_model_len": s.max_model_len, **extra} for m in s.served]
            self._send(200, json.dumps({"object": "list", "data": cards}), "application/json")
        elif self.path == "/version" and s.version is not None:
            self._send(200, json.dumps({"version": s.version}), "application/json")
        elif self.path == "/metrics":
            text = (
                "# TYPE vllm:time_to_first_token_seconds histogram\n"
                f'vllm:time_to_first_token_seconds_bucket{{le="0.01"}} {s.ttft_count}\n'
                f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {s.ttft_count}\n'
                f"vllm:time_to_first_token_seconds_count {s.ttft_count}\n"
                f"vllm:time_to_first_token_seconds_sum {s.ttft_sum}\n"
                "# TYPE vllm:prefix_cache_queries counter\n"
                f'vllm:prefix_cache_queries_total{{engine="0"}} {s.cache_queries}\n'
                "# TYPE vllm:prefix_cache_hits counter\n"
                f'vllm:prefix_cache_hits_total{{engine="0"}} {s.cache_hits}\n'
            )
            if s.draft is not None:  # vLLM registers these only with a --speculative-config
                for name in ("drafts", "draft_tokens", "accepted_tokens"):
                    text += f"# TYPE vllm:spec_decode_num_{name} counter\n"
                    text += f'vllm:spec_decode_num_{name}_total{{engine="0"}} {s.spec[name]}\n'
                text += "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n"
                for i, v in enumerate(s.spec["per_pos"]):
                    text += f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} {v}\n'
            self._send(200, text)
        elif self.path.startswith(("/api/models/", "/api/datasets/")):
            repo = "/".join(self.path.split("/")[3:5])
            code = s.hub_errors.get(repo, "RepoNotFound")
            status = {"GatedRepo": 401, "RepoNotFound": 404}[code]
            message = json.dumps({"error": f"{code}: {repo}"})
            self._send(status, message, "application/json", {"X-Error-Code": code, "X-Error-Message": code})
        else:
            self._send(404, "not found")

    def _send(self, status: int, text: str, content_type: str | None = None, headers: dict | None = None) -> None:
        self._send_bytes(status, text.encode(), content_type, headers)

    def _send_raw(self, body: dict) -> None:
        """HTTP 200 with the server's `raw` answer as it is (a bare answer: SSE when streamed, else JSON)."""
        raw = self.server.raw if self.server.raw is not None else ("text/event-stream", b"data: [DONE]\n\n")
        if isinstance(raw, bytes):
            raw = ("text/event-stream" if body.get("stream") else "application/json", raw)
        self._send_bytes(200, raw[1], raw[0])

    def _send_bytes(self, status: int, body: bytes, content_type: str | None = None, headers: dict | None = None):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        s = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with s.lock:
            s.requests.append(body)
            s.paths.append(self.path)
            n_seen = len(s.requests)
            s.in_flight += 1
            s.max_in_flight = max(s.max_in_flight, s.in_flight)
            s.events.append(("start", n_seen))
            if n_seen == s.hold_first_until:
                s.held.set()
        self.n_seen, self.ended = n_seen, False
        try:
            if s.die_after is not None and n_seen > s.die_after:
                threading.Thread(target=s.stop, daemon=True).start()
                self.connection.close()
                return
            mode = s.mode_of(body, n_seen)
            if s.raw is not None or mode == "raw":
                self._send_raw(body)
            elif mode == "error":
                self._send(s.error_status, s.error_body, "application/json")
            elif mode == "die":
                os._exit(0)
            elif body.get("stream"):
                self._stream(body, mode, hold=n_seen == 1 and s.hold_first_until is not None)
            else:
                self._reply(body, mode)
        finally:
            self._end()

    def _end(self) -> None:
        """This request's answer is complete (once): called before its last write, or when the handler returns."""
        s = self.server
        with s.lock:
            if not self.ended:
                self.ended = True
                s.in_flight -= 1
                s.events.append(("end", self.n_seen))

    def _reply(self, body: dict, mode: str) -> None:
        """One JSON body, as the eval client and readiness checks read it."""
        s = self.server
        if mode == "ok":
            text = s.answer(body) if callable(s.answer) else s.answer
            message = text if isinstance(text, dict) else {"role": "assistant", "content": text}
            choice = {"message": message} if "messages" in body else {"text": text}
            tokens = min(ANSWER_TOKENS, body.get("max_tokens") or ANSWER_TOKENS)
            reply = {
                "choices": [{"index": 0, **choice, "finish_reason": s.finish_reason}],
                "usage": {"prompt_tokens": 10, "completion_tokens": tokens},
            }
            self._send(200, json.dumps(reply), "application/json")
        elif mode == "stall":
            s.release.wait(s.stall_s)
        elif mode in ("trickle", "cut"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            if mode == "cut":
                self.wfile.write(b'{"choice":')  # 10 bytes, then the connection closes
                return
            deadline = time.monotonic() + s.stall_s
            while time.monotonic() < deadline and not s.release.wait(0.2):
                self.wfile.write(b" ")
                self.wfile.flush()
        else:
            raise ValueError(f"mode {mode!r} has no answer in one body")

    def _cache(self, body: dict) -> None:
        """Look the prompt's full blocks up in the prefix cache (a block hits only after hits on all before it)."""
        s = self.server
        tokens = tuple(body["prompt"]) if "prompt" in body else tuple(body["messages"][0]["content"].split(" "))
        with s.lock:
            s.cache_queries += len(tokens)
            chained = True
            for end in range(s.block, len(tokens) + 1, s.block):
                key = tokens[:end]
                chained = chained and key in s.cached_blocks
                s.cache_hits += s.block if chained else 0
                s.cached_blocks.add(key)

    def _stream(self, body: dict, mode: str, hold: bool) -> None:
        s = self.server
        prompt = len(body["prompt"]) if "prompt" in body else s.chat_tokens(body["messages"][0]["content"])
        self._cache(body)
        if mode == "truncate":
            prompt = min(prompt, 64)
        n = body.get("max_tokens") or body.get("max_completion_tokens")
        if mode == "short":
            n -= 1
        if mode == "noeos" and not body.get("ignore_eos"):
            n = min(n, 3)
        per_chunk = 2 if mode == "burst" else 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if hold:
            s.held.wait()
        if mode == "stall" or (s.stall_prompts_over is not None and prompt > s.stall_prompts_over):
            s.release.wait(s.stall_s)
        if mode == "trickle":
            deadline = time.monotonic() + s.stall_s
            try:
                while time.monotonic() < deadline and not s.release.wait(0.05):
                    self.wfile.write(b":")  # an SSE comment byte: the connection is never silent for long
                    self.wfile.flush()
            except OSError:
                pass  # the client gave up
            return
        sent, chunks = 0, 0
        t0 = time.perf_counter()
        buffered = []
        while sent < n:
            if mode != "flush" or sent == 0:
                time.sleep(s.token_delay_s * per_chunk)
            k = min(per_chunk, n - sent)
            sent += k
            chunks += 1
            finish = ("length" if sent == body.get("max_tokens", sent) else "stop") if sent == n else None
            usage = {"prompt_tokens": prompt, "completion_tokens": sent, "total_tokens": prompt + sent}
            event = {"choices": [{"index": 0, "text": "x" * k, "finish_reason": finish}], "usage": usage}
            if mode == "flush":
                buffered.append(f"data: {json.dumps(event)}\n\n".encode())
                continue
            self._event(event)
            if chunks == 1:
                with s.lock:
                    s.ttft_count += 1
                    s.ttft_sum += time.perf_counter() - t0
            if mode == "cut" and chunks == 2:
                return  # the connection closes without [DONE]
        if buffered:
            self.wfile.write(b"".join(buffered))  # one write: the client sees the whole stream at once
        if s.draft is not None:
            with s.lock:
                steps = sent / (1.0 + sum(s.draft))
                s.spec["drafts"] += steps
                s.spec["draft_tokens"] += steps * len(s.draft)
                s.spec["accepted_tokens"] += steps * sum(s.draft)
                s.spec["per_pos"] = [a + steps * p for a, p in zip(s.spec["per_pos"], s.draft, strict=True)]
        self._event({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": sent}})
        self._end()  # before [DONE]: the client frees its slot after reading it, never before the server counts
        self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, msg: dict) -> None:
        self.wfile.write(f"data: {json.dumps(msg)}\n\n".encode())
        self.wfile.flush()
