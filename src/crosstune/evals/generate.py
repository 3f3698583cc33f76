"""Sampling completions: an OpenAI-compatible endpoint (vLLM) or a local transformers model, cached.

The endpoint client uses only the standard library (urllib): one request per sample (so the cache and
resume work per sample), a thread pool for concurrency, retries with exponential backoff on connection
errors, timeouts, 429 and 5xx.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from crosstune.errors import CrosstuneError
from crosstune.evals.cache import CompletionCache, SamplingParams, cache_key
from crosstune.evals.problems import Problem
from crosstune.evals.prompts import Message, build_messages, prompt_hash


class GenerationError(CrosstuneError, RuntimeError):
    """Some samples could not be generated; the ones that were are in the cache."""


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str | None = None
    usage: dict | None = None


class Backend(Protocol):
    """Anything that turns chat messages into one sampled completion."""

    model: str
    max_concurrency: int

    def complete(self, messages: list[Message], params: SamplingParams, sample: int) -> Completion: ...


class EndpointBackend:
    """POST /v1/chat/completions on an OpenAI-compatible server."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        retries: int = 5,
        backoff_s: float = 2.0,
        max_concurrency: int = 16,
    ):
        base = base_url.rstrip("/")
        self.url = base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")
        self.model, self.api_key, self.timeout_s = model, api_key, timeout_s
        self.retries, self.backoff_s, self.max_concurrency = retries, backoff_s, max_concurrency

    def _post(self, payload: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, json.dumps(payload).encode("utf-8"), headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return json.loads(response.read().decode("utf-8"))

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
        for attempt in range(self.retries + 1):
            try:
                body = self._post(payload)
                choice = body["choices"][0]
                return Completion(choice["message"]["content"] or "", choice.get("finish_reason"), body.get("usage"))
            except urllib.error.HTTPError as e:
                if e.code != 429 and e.code < 500:
                    detail = e.read().decode("utf-8", errors="replace")[:500]
                    raise GenerationError(f"{self.url}: HTTP {e.code}: {detail}") from e
                error: Exception = e
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                error = e
            except (KeyError, IndexError, TypeError, json.JSONDecodeError) as e:
                raise GenerationError(f"{self.url}: unexpected response shape ({e!r})") from e
            if attempt < self.retries:
                time.sleep(self.backoff_s * 2**attempt * (0.5 + random.random() / 2))
        raise GenerationError(f"{self.url}: failed after {self.retries + 1} attempts: {error}")


class TransformersBackend:
    """A local model through transformers (AutoModelForCausalLM + the tokenizer's chat template)."""

    max_concurrency = 1  # one generate() at a time; the model is not shared across threads

    def __init__(self, model_path: str | Path, device: str = "cpu"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self.model = str(model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.lm = AutoModelForCausalLM.from_pretrained(model_path).to(device).eval()
        self.device = device
        self._lock = threading.Lock()

    def complete(self, messages: list[Message], params: SamplingParams, sample: int) -> Completion:
        inputs = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_dict=True, return_tensors="pt"
        ).to(self.device)
        sampling = {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p}
        with self._lock, self._torch.no_grad():
            self._torch.manual_seed(params.seed + sample)
            output = self.lm.generate(
                **inputs,
                max_new_tokens=params.max_tokens,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                **(sampling if params.temperature > 0 else {"do_sample": False}),
            )
        new_tokens = output[0, inputs["input_ids"].shape[1] :]
        finish = "length" if len(new_tokens) >= params.max_tokens else "stop"
        return Completion(self.tokenizer.decode(new_tokens, skip_special_tokens=True), finish)


@dataclass(frozen=True)
class _Job:
    problem: str
    sample: int
    messages: list[Message]
    key: str
    prompt_hash: str


def generate_completions(
    problems: Sequence[Problem],
    backend: Backend,
    params: SamplingParams,
    cache: CompletionCache,
    prompt_style: str = "verilogeval",
    shots: int = 0,
    concurrency: int = 8,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, list[str]]:
    """`params.n` completions per problem, asking the backend only for those missing from `cache`.

    `on_progress(done, total)` is called after each sample. Raises GenerationError after all requests
    ended if any failed (the successful ones are cached, so a rerun asks only the rest).
    """
    jobs = []
    for problem in problems:
        messages = build_messages(problem, prompt_style, shots)
        digest = prompt_hash(messages)
        for sample in range(params.n):
            key = cache_key(backend.model, problem.name, digest, sample, params)
            jobs.append(_Job(problem.name, sample, messages, key, digest))
    missing = [job for job in jobs if cache.get(job.key) is None]
    done, total, failures = len(jobs) - len(missing), len(jobs), []
    if on_progress:
        on_progress(done, total)
    workers = max(1, min(concurrency, backend.max_concurrency, len(missing) or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: dict[Future, _Job] = {pool.submit(backend.complete, j.messages, params, j.sample): j for j in missing}
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    job = pending.pop(future)
                    try:
                        completion = future.result()
                    except GenerationError as e:
                        failures.append(f"{job.problem} sample {job.sample}: {e}")
                        continue
                    cache.put(_record(job, backend.model, params, completion))
                    done += 1
                    if on_progress:
                        on_progress(done, total)
        except BaseException:
            for future in pending:
                future.cancel()  # interrupted: stop queued requests, keep what is cached
            raise
    if failures:
        raise GenerationError(f"{len(failures)} of {total} samples failed; rerun to resume. First: {failures[0]}")
    return {p.name: [cache.get(j.key)["completion"] for j in jobs if j.problem == p.name] for p in problems}


def _record(job: _Job, model: str, params: SamplingParams, completion: Completion) -> dict:
    return {
        "key": job.key,
        "model": model,
        "problem": job.problem,
        "prompt_hash": job.prompt_hash,
        "sample": job.sample,
        "params": params.key_fields(),
        "completion": completion.text,
        "finish_reason": completion.finish_reason,
        "usage": completion.usage,
    }
