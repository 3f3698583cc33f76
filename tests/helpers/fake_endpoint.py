"""A misbehaving OpenAI-compatible server on 127.0.0.1 for the eval client's failure tests.

Each POST /v1/chat/completions is answered by the behaviour `behaviour(seed)` names (the request's seed is
sample index + base seed): "ok", "error" (HTTP 500 with a long JSON body), "stall" (never answers),
"trickle" (headers, then one body byte every 0.2 s) or "cut" (Content-Length 1000, 10 bytes, then close).
GET /v1/models lists `served` (each with vLLM's `root`, the folder it serves, when `root` is given), or stalls when
`models_stall` is set.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ERROR_BODY = json.dumps({"error": {"message": "KV cache exhausted " + "x" * 600, "code": 500}})
GOOD_DESIGN = "[BEGIN]\nmodule TopModule(input a, input b, output out);\n  assign out = a & b;\nendmodule\n[DONE]"


class FakeEndpoint:
    def __init__(
        self,
        behaviour: Callable[[int], str] = lambda seed: "ok",
        served: tuple[str, ...] = ("m",),
        models_stall: bool = False,
        answer: str = GOOD_DESIGN,
        root: str | None = None,
    ):
        self.posts: list[int] = []  # the seed of every POST, in arrival order
        self.lock = threading.Lock()
        self.release = threading.Event()  # set on exit: stalled and trickling handlers end
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def send_json(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                if models_stall:
                    endpoint.release.wait(30)
                    return
                listed = [{"id": name, **({"root": root} if root else {})} for name in served]
                self.send_json(200, json.dumps({"data": listed}).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with endpoint.lock:
                    endpoint.posts.append(body["seed"])
                mode = behaviour(body["seed"])
                self.close_connection = True
                if mode == "ok":
                    reply = {"choices": [{"message": {"role": "assistant", "content": answer},
                                          "finish_reason": "stop"}], "usage": {"completion_tokens": 5}}  # fmt: skip
                    self.send_json(200, json.dumps(reply).encode())
                elif mode == "error":
                    self.send_json(500, ERROR_BODY.encode())
                elif mode == "stall":
                    endpoint.release.wait(30)
                elif mode in ("trickle", "cut"):
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    if mode == "cut":
                        self.wfile.write(b'{"choice":')  # 10 bytes, then the connection closes
                        return
                    while not endpoint.release.wait(0.2):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                else:
                    raise ValueError(mode)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def wait_for_posts(self, count: int, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.posts) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server saw {len(self.posts)} requests, expected {count}")
            time.sleep(0.02)

    def __enter__(self) -> FakeEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
