"""Sampling completions from a backend (endpoint.py: an OpenAI-compatible server; local.py: a transformers model),
cached per sample so that resume works per sample: requests in parallel, or batches for a backend that batches.
Every cached record names the engine that produced it (summary.json reports it) and the model's identity, which is
part of its key: new weights at the same path, or behind the same served name, are asked again.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from crosstune.errors import CrosstuneError
from crosstune.evals.generation.cache import CompletionCache, SamplingParams, cache_key
from crosstune.evals.problems.problem_sets import Problem
from crosstune.evals.problems.prompt_styles import Message, build_messages, prompt_hash

UNKNOWN_ENGINE = {"name": "unknown (not recorded)", "kind": "unknown"}


class GenerationError(CrosstuneError, RuntimeError):
    """A sample could not be generated. `endpoint_trouble`: the server failed (down, stalled, overloaded),
    not this one request."""

    def __init__(self, message: str, endpoint_trouble: bool = False):
        super().__init__(message)
        self.endpoint_trouble = endpoint_trouble


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str | None = None
    usage: dict | None = None


class Generator(Protocol):
    """Anything that turns chat messages into sampled completions. With `batch_size` > 1 it also has
    `complete_batch(requests: list[(messages, sample)], params) -> list[Completion]`, taking that many at once (a
    local model batches; an endpoint is sent one request per sample, in parallel)."""

    model: str
    max_concurrency: int
    batch_size: int
    engine: dict  # {"name": ..., "kind": "endpoint" | "local", ...}: what produced the completions
    identity: dict  # what the model is (its files' fingerprint, a served name...): the cache key's model part

    def complete(self, messages: list[Message], params: SamplingParams, sample: int) -> Completion:
        """One sample; raises GenerationError when it cannot be had."""
        ...

    def probe(self) -> None:
        """Raise GenerationError, in seconds, when the backend cannot answer at all; complete `identity`."""
        ...

    def cancel(self) -> None:
        """Stop work in flight as far as possible, and refuse new work."""
        ...


@dataclass(frozen=True, eq=False)  # compared by identity: one job per sample
class _Job:
    problem: str
    sample: int
    messages: list[Message]
    key: str
    prompt_hash: str


@dataclass(frozen=True)
class SampleFailure:
    problem: str
    sample: int
    reason: str


@dataclass
class Generation:
    """Per problem, one entry per sample: the completion, or None where it failed (see `failures`); `engines`: the
    distinct engines that produced the completions (records cached before engines were recorded count as unknown)."""

    completions: dict[str, list[str | None]]
    failures: list[SampleFailure]
    engines: list[dict] = field(default_factory=list)
    from_cache: int = 0  # samples read from the cache, not asked of the model
    identity: dict = field(default_factory=dict)  # the model's, as the cache keys it

    @property
    def failure_reasons(self) -> dict[tuple[str, int], str]:
        return {(f.problem, f.sample): f.reason for f in self.failures}


def generate_completions(
    problems: Sequence[Problem],
    backend: Generator,
    params: SamplingParams,
    cache: CompletionCache,
    prompt_style: str = "verilogeval",
    shots: int = 0,
    concurrency: int = 8,
    on_progress: Callable[[int, int], None] | None = None,
    revision: str | None = None,
) -> Generation:
    """`params.n` completions per problem, asking the backend only for those missing from `cache`.

    Every sample ends with a completion (cached at once) or a recorded failure; a rerun asks only for what
    is missing. The backend is probed first, so a dead endpoint fails in seconds before the batch is sent (and an
    endpoint says there what it serves, which the key needs). `revision`: what the caller knows of the model's
    version (the study: its export's hash), part of the key. `on_progress(done, total)` is called after each
    sample. Ctrl-C (KeyboardInterrupt) cuts the requests in flight and propagates; what finished is cached.
    """
    backend.probe()
    identity = {**backend.identity, **({"revision": revision} if revision else {})}
    jobs = []
    for problem in problems:
        messages = build_messages(problem, prompt_style, shots)
        digest = prompt_hash(messages)
        for sample in range(params.n):
            key = cache_key(identity, problem.name, digest, sample, params)
            jobs.append(_Job(problem.name, sample, messages, key, digest))
    missing = [job for job in jobs if cache.get(job.key) is None]
    failures: dict[_Job, str] = {}
    if on_progress:
        on_progress(len(jobs) - len(missing), len(jobs))
    if missing:
        failures = _ask(backend, params, missing, cache, concurrency, len(jobs), identity, on_progress)
    completions: dict[str, list[str | None]] = {p.name: [] for p in problems}
    engines: list[dict] = []
    for job in jobs:
        record = cache.get(job.key)
        completions[job.problem].append(None if record is None else record["completion"])
        engine = UNKNOWN_ENGINE if record is None else record.get("engine") or UNKNOWN_ENGINE
        if record is not None and engine not in engines:
            engines.append(engine)
    failed = [SampleFailure(job.problem, job.sample, reason) for job, reason in failures.items()]
    failed.sort(key=lambda f: (f.problem, f.sample))
    return Generation(completions, failed, engines, from_cache=len(jobs) - len(missing), identity=identity)


def _ask(
    backend: Generator,
    params: SamplingParams,
    jobs: list[_Job],
    cache: CompletionCache,
    concurrency: int,
    total: int,
    identity: dict,
    on_progress: Callable[[int, int], None] | None,
) -> dict[_Job, str]:
    """Ask for `jobs` on daemon threads (a request stuck in connect never delays exit); failures by job.

    After `max(3, workers)` endpoint failures in a row (down, stalled, overloaded) the rest is not sent.
    """
    size = max(1, getattr(backend, "batch_size", 1))
    units = [jobs[i : i + size] for i in range(0, len(jobs), size)]  # a batch: consecutive jobs, in job order
    workers = max(1, min(concurrency, backend.max_concurrency, len(units)))
    stop = threading.Event()
    give_up_after = max(3, workers)
    results = _send(backend, params, units, workers, give_up_after, stop)
    failures: dict[_Job, str] = {}
    done, in_a_row = total - len(jobs), 0
    try:
        for received in range(1, len(jobs) + 1):
            job, result = _next_result(results)
            if isinstance(result, Completion):
                cache.put(_record(job, backend.model, identity, params, result, backend.engine))
                done, in_a_row = done + 1, 0
                if on_progress:
                    on_progress(done, total)
                continue
            if not isinstance(result, GenerationError):
                raise result
            failures[job] = str(result)
            in_a_row = in_a_row + 1 if result.endpoint_trouble else 0
            if in_a_row >= give_up_after and received < len(jobs):
                reason = f"not completed: the endpoint failed {in_a_row} samples in a row (last: {result})"
                stop.set()
                backend.cancel()
                for rest in jobs:
                    if rest not in failures and cache.get(rest.key) is None:
                        failures[rest] = reason
                break
    except BaseException:
        stop.set()
        backend.cancel()  # interrupted: cut the requests in flight; the finished ones are cached
        raise
    return failures


def _send(
    backend: Generator,
    params: SamplingParams,
    units: list[list[_Job]],
    workers: int,
    give_up_after: int,
    stop: threading.Event,
) -> queue.Queue[tuple[_Job, Completion | BaseException]]:
    """Start `workers` daemon threads that ask for the `units` (one job, or a batch for a batching backend) until
    they are done or `stop` is set; every answer (or what was raised) comes back on the returned queue. `stop` is
    set after `give_up_after` endpoint failures in a row, or on anything but a completion or a GenerationError."""
    size = max(1, getattr(backend, "batch_size", 1))
    todo: queue.Queue[list[_Job]] = queue.Queue()
    for unit in units:
        todo.put(unit)
    results: queue.Queue[tuple[_Job, Completion | BaseException]] = queue.Queue()
    # The streak is counted where results are put, under one lock, so a worker never sends another request after
    # the failure that ends the streak (counted only by the main thread, a worker raced it under load).
    streak, streak_lock = [0], threading.Lock()

    def hand_over(job: _Job, answer: Completion | BaseException) -> None:
        with streak_lock:
            trouble = isinstance(answer, GenerationError) and answer.endpoint_trouble
            streak[0] = streak[0] + 1 if trouble else 0
            if streak[0] >= give_up_after or not isinstance(answer, Completion | GenerationError):
                stop.set()
            results.put((job, answer))

    def work() -> None:
        while not stop.is_set():
            try:
                unit = todo.get_nowait()
            except queue.Empty:
                return
            try:
                if size == 1:
                    answers = [backend.complete(unit[0].messages, params, unit[0].sample)]
                else:
                    answers = backend.complete_batch([(job.messages, job.sample) for job in unit], params)  # type: ignore[attr-defined]
            except BaseException as e:  # handed to the main thread, which decides (for every job of the unit)
                answers = [e] * len(unit)
            for job, answer in zip(unit, answers, strict=True):
                hand_over(job, answer)

    for i in range(workers):
        threading.Thread(target=work, name=f"crosstune-eval-request-{i}", daemon=True).start()
    return results


def _next_result(results: queue.Queue) -> tuple[_Job, Completion | BaseException]:
    """The next finished request. Waits in short slices: Ctrl-C's SIGINT may land on a request thread, and then
    only a main thread that wakes up runs Python's handler (an untimed wait would sleep through it)."""
    while True:
        try:
            return results.get(timeout=0.2)
        except queue.Empty:
            continue


def _record(
    job: _Job, model: str, identity: dict, params: SamplingParams, completion: Completion, engine: dict
) -> dict:
    return {
        "key": job.key,
        "model": model,
        "model_identity": identity,
        "problem": job.problem,
        "prompt_hash": job.prompt_hash,
        "sample": job.sample,
        "params": params.key_fields(),
        "completion": completion.text,
        "finish_reason": completion.finish_reason,
        "usage": completion.usage,
        "engine": engine,
    }
