"""A local OpenAI-compatible streaming server for the bench client's tests, with scripted faults.

The request's `model` picks the behaviour: ok, burst (2 tokens per chunk), noeos (stops at "EOS" after 3 tokens
unless ignore_eos), short (one token short), cut (drops the connection mid-stream), http500, stall (sleeps `stall_s`
before the first chunk), truncate (the prompt is cut to 64 tokens, as an over-long prompt would be), trickle (one
SSE comment byte every 50 ms, never an answer, for up to `stall_s`), flush (every chunk in one write, as a loaded
vLLM flushes a whole stream). With `stall_prompts_over`, prompts longer than that stall like `stall`. /metrics exposes
a vLLM-like histogram; /v1/models lists `served` (with `max_model_len`) when given, else answers 404;
`die_after` makes the whole server stop after that many requests.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FixtureServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        token_delay_s: float = 0.002,
        slow_first_s: float = 0.0,
        die_after: int | None = None,
        served: list[str] | None = None,
        max_model_len: int | None = None,
        stall_s: float = 3.0,
        stall_prompts_over: int | None = None,
    ):
        super().__init__(("127.0.0.1", 0), Handler)
        self.token_delay_s, self.slow_first_s, self.die_after = token_delay_s, slow_first_s, die_after
        self.served, self.max_model_len = served, max_model_len
        self.stall_s, self.stall_prompts_over = stall_s, stall_prompts_over
        self.release = threading.Event()  # set on stop: stalled and trickling handlers end
        self.lock = threading.Lock()
        self.requests: list[dict] = []  # bodies received
        self.in_flight = self.max_in_flight = 0
        self.ttft_sum = self.ttft_count = 0.0
        self.chat_tokens = lambda text: 7  # usage.prompt_tokens for a chat request (tests plug in the template)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    def handle_error(self, request, client_address) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up: expected in fault tests
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> FixtureServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # close-delimited bodies: the stream ends when the socket closes
    server: FixtureServer

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/health":
            self._plain(200, "")
        elif self.path == "/v1/models" and self.server.served is not None:
            cards = [
                {"id": m, "object": "model", "max_model_len": self.server.max_model_len} for m in self.server.served
            ]
            self._plain(200, json.dumps({"object": "list", "data": cards}))
        elif self.path == "/metrics":
            s = self.server
            text = (
                "# TYPE vllm:time_to_first_token_seconds histogram\n"
                f'vllm:time_to_first_token_seconds_bucket{{le="0.01"}} {s.ttft_count}\n'
                f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {s.ttft_count}\n'
                f"vllm:time_to_first_token_seconds_count {s.ttft_count}\n"
                f"vllm:time_to_first_token_seconds_sum {s.ttft_sum}\n"
            )
            self._plain(200, text)
        else:
            self._plain(404, "not found")

    def _plain(self, status: int, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        s = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with s.lock:
            s.requests.append(body)
            n_seen = len(s.requests)
            s.in_flight += 1
            s.max_in_flight = max(s.max_in_flight, s.in_flight)
        try:
            if s.die_after is not None and n_seen > s.die_after:
                threading.Thread(target=s.stop, daemon=True).start()
                self.connection.close()
                return
            self._stream(body, slow=s.slow_first_s if n_seen == 1 else 0.0)
        finally:
            with s.lock:
                s.in_flight -= 1

    def _stream(self, body: dict, slow: float) -> None:
        mode = body["model"]
        if mode == "http500":
            self._plain(500, '{"error": "scripted failure"}')
            return
        prompt = len(body["prompt"]) if "prompt" in body else self.server.chat_tokens(body["messages"][0]["content"])
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
        time.sleep(slow)
        over = self.server.stall_prompts_over
        if mode == "stall" or (over is not None and prompt > over):
            self.server.release.wait(self.server.stall_s)
        if mode == "trickle":
            deadline = time.monotonic() + self.server.stall_s
            try:
                while time.monotonic() < deadline and not self.server.release.wait(0.05):
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
                time.sleep(self.server.token_delay_s * per_chunk)
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
                with self.server.lock:
                    self.server.ttft_count += 1
                    self.server.ttft_sum += time.perf_counter() - t0
            if mode == "cut" and chunks == 2:
                return  # the connection closes without [DONE]
        if buffered:
            self.wfile.write(b"".join(buffered))  # one write: the client sees the whole stream at once
        self._event({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": sent}})
        self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, msg: dict) -> None:
        self.wfile.write(f"data: {json.dumps(msg)}\n\n".encode())
        self.wfile.flush()


def cli(*args: str):
    """`crosstune ARGS` in-process (typer's CliRunner): the result's exit_code and output (stdout + stderr)."""
    from typer.testing import CliRunner

    from crosstune.cli import _register, app

    if not any(c.name == "export" for c in app.registered_commands):
        _register()
    return CliRunner().invoke(app, list(args))


def bench_args(url: str, tokenizer, *extra: str, model: str = "ok") -> list[str]:
    """A small `bench serve` against `url`: one context of 16 tokens, concurrency 1, 8 output tokens, 2 requests."""
    base = ["bench", "serve", "--endpoint", url, "--model", model, "--tokenizer", str(tokenizer)]
    base += ["--contexts", "16", "--concurrency", "1", "--output-len", "8", "--num-requests", "2", "--warmup", "0"]
    return [*base, *extra]


def one_line_error(result) -> str:
    """The single `error: …` line an expected failure prints (asserts there is exactly one and no traceback)."""
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return lines[0]
