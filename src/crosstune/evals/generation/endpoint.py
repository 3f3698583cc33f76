"""The OpenAI-compatible endpoint client: a deadline per request, a reachability probe, and cancellation.

Built on http.client rather than urllib or httpx because their timeouts bound each socket operation, not the
exchange: a server that trickles a byte every few seconds never times out. Here a timer shuts the request's
socket down at its deadline, and `cancel()` does the same to every request in flight (Ctrl-C).
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from crosstune.evals.generation.cache import SamplingParams
from crosstune.evals.generation.generate import Completion, GenerationError
from crosstune.evals.problems.prompt_styles import Message
from crosstune.fsutil import files_fingerprint
from crosstune.recipe.schema import EVAL_DEFAULTS
from crosstune.untrusted_files import parse_json

ERROR_BODY_CHARS = 500  # how much of a server's error body a failure reason quotes


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `read_s` is the longest silence (for a non-streamed answer: the whole generation); `request_s`
    bounds one request from connect to last byte, however slowly the server sends."""

    connect_s: float = EVAL_DEFAULTS.connect_timeout_s
    read_s: float = EVAL_DEFAULTS.read_timeout_s
    request_s: float = EVAL_DEFAULTS.request_timeout_s

    def __post_init__(self) -> None:
        for name in ("connect_s", "read_s", "request_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"timeout {name} must be > 0, got {getattr(self, name)}")


class EndpointUnreachable(GenerationError):
    """The endpoint does not answer at all (probe failed): nothing was sent."""


class _AttemptFailed(Exception):
    """One attempt failed. `retryable`: another attempt may help; `endpoint_trouble`: the server is failing
    (down, stalled, overloaded), not this one request."""

    def __init__(self, reason: str, retryable: bool, endpoint_trouble: bool | None = None):
        super().__init__(reason)
        self.reason, self.retryable = reason, retryable
        self.endpoint_trouble = retryable if endpoint_trouble is None else endpoint_trouble


def _shut(sock: socket.socket) -> None:
    """Wake a thread blocked on `sock` (its recv returns end-of-file). The plain socket's shutdown, also for
    TLS: SSLSocket.shutdown would drop its SSL state under the reading thread."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed or never connected


def _snippet(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text[:ERROR_BODY_CHARS] + (" …" if len(text) > ERROR_BODY_CHARS else "") if text else "(empty body)"


class EndpointGenerator:
    """POST /v1/chat/completions on an OpenAI-compatible server (vLLM), one sample per request."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeouts: Timeouts = Timeouts(),
        retries: int = 5,
        backoff_s: float = 2.0,
        max_concurrency: int = 16,
    ):
        parts = urlsplit(base_url if "://" in base_url else f"http://{base_url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise GenerationError(f"--endpoint {base_url!r}: expected a URL such as http://localhost:8000")
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port or (443 if self.https else 80)
        root = parts.path.rstrip("/")
        root = root if root.endswith("/v1") else root + "/v1"
        self.base_url = f"{parts.scheme}://{parts.netloc}{root}"
        self.chat_path, self.models_path = root + "/chat/completions", root + "/models"
        self.url = self.base_url + "/chat/completions"
        self.model, self.api_key, self.timeouts = model, api_key, timeouts
        self.retries, self.backoff_s, self.max_concurrency = retries, backoff_s, max_concurrency
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        # Which server answers; probe() names it (vLLM says so in /v1/models' owned_by and serves /version).
        self.engine: dict = {"name": "openai-compatible endpoint", "kind": "endpoint", "url": self.base_url}
        # What answers, for the completion cache: the served name; probe() adds the files vLLM serves (its `root`).
        self.identity: dict = {"served": model}

    def cancel(self) -> None:
        """Cut every request in flight and refuse new ones (Ctrl-C, or the endpoint gave up answering)."""
        self._cancelled.set()
        with self._lock:
            for sock in self._sockets:
                _shut(sock)

    def probe(self) -> None:
        """GET /v1/models within the connect timeout: fail in seconds, naming the URL, when nothing answers,
        and name the served models when `model` is not among them."""
        try:
            status, data = self._exchange("GET", self.models_path, None, self.timeouts.connect_s, "connect timeout")
        except _AttemptFailed as e:
            raise EndpointUnreachable(
                f"{self.base_url}/models: {e.reason}. Is the server running and is --endpoint right? Nothing was sent."
            ) from None
        if status in (401, 403):
            raise EndpointUnreachable(
                f"{self.base_url}/models: HTTP {status} {_snippet(data)} — set the API key "
                "(--api-key-env names its environment variable)"
            )
        if status != 200:
            return  # it answers; a server without /v1/models still serves completions
        try:
            entries = parse_json(data, f"{self.models_path} (its answer)")["data"]
            served = [entry["id"] for entry in entries]
        except (ValueError, KeyError, TypeError):
            return
        if served and self.model not in served:
            raise EndpointUnreachable(
                f"{self.base_url} serves {served}, not {self.model!r}: pass one of them as --model"
            )
        entry = next((e for e in entries if isinstance(e, dict) and e.get("id") == self.model), {})
        self.identity = {"served": self.model, **_served_files(entry.get("root"))}
        owner = entry.get("owned_by")
        if owner == "vllm":
            self.engine = {
                **self.engine,
                "name": f"vllm {self._server_version() or '(version unknown)'}".strip(),
                "server": "vllm",
            }
        elif owner:
            self.engine = {**self.engine, "name": f"openai-compatible endpoint ({owner})", "server": owner}

    def _server_version(self) -> str | None:
        """vLLM's GET /version, best effort within the connect timeout."""
        root = self.models_path.rsplit("/v1/", 1)[0]
        try:
            status, data = self._exchange("GET", f"{root}/version", None, self.timeouts.connect_s, "connect timeout")
            version = parse_json(data, f"{root}/version (its answer)").get("version") if status == 200 else None
        except (_AttemptFailed, ValueError, AttributeError):
            return None
        return str(version) if version else None

    def complete(self, messages: list[Message], params: SamplingParams, sample: int) -> Completion:
        payload = {
            "model": self.model,
            "messages": messages,
            "n": 1,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "seed": params.seed + sample,  # distinct, reproducible samples where the server honours seeds
        }
        body = json.dumps(payload).encode("utf-8")
        attempt = 0
        while True:
            attempt += 1
            try:
                status, data = self._exchange("POST", self.chat_path, body, self.timeouts.request_s, "request timeout")
                if status == 200:
                    return _parse_completion(data)
                raise _AttemptFailed(f"HTTP {status}: {_snippet(data)}", retryable=status == 429 or status >= 500)
            except _AttemptFailed as e:
                failure = e
            if not failure.retryable or attempt > self.retries or self._cancelled.is_set():
                break
            delay = self.backoff_s * 2 ** (attempt - 1) * (0.5 + random.random() / 2)
            if self._cancelled.wait(delay):  # a backoff sleep that Ctrl-C ends at once
                break
        tries = f" (after {attempt} attempts)" if attempt > 1 else ""
        raise GenerationError(f"{failure.reason}{tries}", endpoint_trouble=failure.endpoint_trouble)

    def _headers(self, body: bytes | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _exchange(
        self, method: str, path: str, body: bytes | None, deadline_s: float, deadline_name: str
    ) -> tuple[int, bytes]:
        """One HTTP request that ends within `deadline_s` seconds; (status, body) or _AttemptFailed."""
        if self._cancelled.is_set():
            raise _AttemptFailed("interrupted", retryable=False)
        start = time.monotonic()
        connection_type = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = connection_type(self.host, self.port, timeout=min(self.timeouts.connect_s, deadline_s))
        expired = threading.Event()
        try:
            try:
                conn.connect()
            except TimeoutError:
                raise _AttemptFailed(
                    f"no connection within the connect timeout ({self.timeouts.connect_s:g} s)", retryable=True
                ) from None
            except OSError as e:
                raise _AttemptFailed(f"cannot connect ({e.strerror or e})", retryable=True) from None
            sock = conn.sock
            sock.settimeout(min(self.timeouts.read_s, deadline_s))

            def cut_at_deadline() -> None:
                expired.set()
                _shut(sock)

            timer = threading.Timer(max(0.0, deadline_s - (time.monotonic() - start)), cut_at_deadline)
            timer.daemon = True  # never keeps the interpreter alive
            with self._lock:
                self._sockets.add(sock)
            timer.start()
            try:
                if self._cancelled.is_set():  # cancel() ran between the check above and the registration
                    raise _AttemptFailed("interrupted", retryable=False)
                conn.request(method, path, body, self._headers(body))
                response = conn.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException) as e:
                if isinstance(e, TimeoutError) and deadline_s <= self.timeouts.read_s:
                    expired.set()  # the socket's timeout was the deadline itself: it may fire before the timer does
                raise self._why(e, expired, f"the {deadline_name} ({deadline_s:g} s)") from None
            finally:
                timer.cancel()
                with self._lock:
                    self._sockets.discard(sock)
        finally:
            conn.close()

    def _why(self, error: Exception, expired: threading.Event, deadline: str) -> _AttemptFailed:
        """The reason an exchange failed, in words; whether the deadline, Ctrl-C or the server caused it."""
        if self._cancelled.is_set():
            return _AttemptFailed("interrupted", retryable=False)
        if expired.is_set():
            return _AttemptFailed(f"no complete answer within {deadline}", retryable=False, endpoint_trouble=True)
        if isinstance(error, TimeoutError):
            return _AttemptFailed(
                f"read timeout: the server sent nothing for {self.timeouts.read_s:g} s",
                retryable=False,
                endpoint_trouble=True,
            )
        if isinstance(error, http.client.IncompleteRead):
            got = len(error.partial)
            total = f" of {got + error.expected}" if error.expected is not None else ""
            return _AttemptFailed(
                f"response cut short: received {got}{total} bytes of the body (IncompleteRead)", retryable=True
            )
        return _AttemptFailed(f"connection failed mid-request ({type(error).__name__}: {error})", retryable=True)


def _served_files(root: object) -> dict:
    """The files behind a served model: vLLM's /v1/models `root` is the folder it loaded. On this machine: their
    fingerprint (not the path, so a moved folder keeps its cache); elsewhere only the path is known (weights None)."""
    if not isinstance(root, str) or not root:
        return {}
    if Path(root).is_dir():
        return {"weights": files_fingerprint(Path(root))}
    return {"root": root, "weights": None}


def _parse_completion(data: bytes) -> Completion:
    """The assistant's text. A server that splits reasoning off (vLLM's --reasoning-parser: `reasoning_content` or
    `reasoning`) gets it back inside <think>, left open when the answer never came within the budget, so the
    completion reads as the model wrote it and extraction sees unfinished reasoning for what it is."""
    try:
        body = parse_json(data, "the endpoint's answer")
        choice = body["choices"][0]
        message = choice["message"]
        content = message["content"]
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        finish = choice.get("finish_reason")
        for name, value in (("content", content), ("reasoning", reasoning)):
            if value is not None and not isinstance(value, str):  # never cached: a rerun asks again
                raise _AttemptFailed(
                    f"the answer's message {name} is {type(value).__name__}, not text: {_snippet(data)}",
                    retryable=False,
                )
        if content is None and not reasoning:
            raise _AttemptFailed(
                f"the answer's message content is null (no text, no reasoning): {_snippet(data)}", retryable=False
            )
        content = content or ""
        if reasoning:
            closed = bool(content) or finish != "length"
            content = f"<think>{reasoning}{'</think>' if closed else ''}{content}"
        return Completion(content, finish, body.get("usage"))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
        raise _AttemptFailed(f"unexpected response ({e!r}): {_snippet(data)}", retryable=False) from None
