"""A local OpenAI-compatible streaming server for the bench client's tests, with scripted faults.

The request's `model` picks the behaviour: ok, burst (2 tokens per chunk), noeos (stops at "EOS" after 3 tokens
unless ignore_eos), short (one token short), cut (drops the connection mid-stream), http500, stall (sleeps before
the first chunk), truncate (the prompt is cut to 64 tokens, as an over-long prompt would be). /metrics exposes a
vLLM-like histogram; `die_after` makes the whole server stop after that many requests.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FixtureServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, token_delay_s: float = 0.002, slow_first_s: float = 0.0, die_after: int | None = None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.token_delay_s, self.slow_first_s, self.die_after = token_delay_s, slow_first_s, die_after
        self.lock = threading.Lock()
        self.requests: list[dict] = []  # bodies received
        self.in_flight = self.max_in_flight = 0
        self.ttft_sum = self.ttft_count = 0.0
        self.chat_tokens = lambda text: 7  # usage.prompt_tokens for a chat request (tests plug in the template)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> FixtureServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
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
        if mode == "stall":
            time.sleep(3.0)
        sent, chunks = 0, 0
        t0 = time.perf_counter()
        while sent < n:
            time.sleep(self.server.token_delay_s * per_chunk)
            k = min(per_chunk, n - sent)
            sent += k
            chunks += 1
            finish = ("length" if sent == body.get("max_tokens", sent) else "stop") if sent == n else None
            usage = {"prompt_tokens": prompt, "completion_tokens": sent, "total_tokens": prompt + sent}
            self._event({"choices": [{"index": 0, "text": "x" * k, "finish_reason": finish}], "usage": usage})
            if chunks == 1:
                with self.server.lock:
                    self.server.ttft_count += 1
                    self.server.ttft_sum += time.perf_counter() - t0
            if mode == "cut" and chunks == 2:
                return  # the connection closes without [DONE]
        self._event({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": sent}})
        self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, msg: dict) -> None:
        self.wfile.write(f"data: {json.dumps(msg)}\n\n".encode())
        self.wfile.flush()
