"""`crosstune bench serve`: a sweep of context lengths × concurrency levels (or request rates) against one
OpenAI-compatible endpoint, warm-up excluded, writing per-request JSONL and a summary JSON into a folder.

Before anything is timed, one probe (GET /v1/models, bounded by `probe_timeout_s`) fails in seconds when nothing
listens, names the served models when `model` is not one of them, and refuses contexts that don't fit the server's
max_model_len. Each cell: `warmup` requests first (not timed), then `num_requests` dispatched at their arrival
times with at most `concurrency` in flight (a semaphore: a finished request frees its slot at once). Every request
has a deadline (`timeout_s`, the whole exchange) and every cell a bound (`cell_timeout_s`): what is cut is recorded
as cut. A server that stops answering, or a cell whose every request failed at the endpoint, ends the sweep with a
clear message; Ctrl-C writes the finished cells with `aborted` saying it was interrupted. Everything measured so far
is written after each cell.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from crosstune.errors import CrosstuneError
from crosstune.servebench import server_metrics
from crosstune.servebench.client import RequestRecord, chat_payload, completion_payload, send
from crosstune.servebench.request_metrics import describe_load, failure_kind, saturation, summarize
from crosstune.servebench.workload import PromptMaker, arrival_times

ENDPOINT_FAILURES = ("timeout", "refused", "dropped stream", "cut", "not sent")  # the server, not the request


class BenchError(CrosstuneError):
    """The benchmark can't run, or measured nothing; the message says why and what to do."""


@dataclass
class SweepConfig:
    """One sweep. Every field is checked by `check()` (run_sweep calls it), naming the `bench serve` option."""

    endpoint: str  # base URL, e.g. http://127.0.0.1:8000
    model: str
    tokenizer: Path
    contexts: list[int]
    concurrency: list[int] = field(default_factory=lambda: [1])
    rates: list[float] | None = None  # request rates (req/s) instead of concurrency levels
    max_concurrency: int | None = None  # with rates: the semaphore (None: unbounded)
    burstiness: float = 1.0
    output_len: int = 32
    num_requests: int = 16
    warmup: int = 2
    api: str = "completions"  # or "chat"
    timeout_s: float = 120.0  # deadline per request: the whole exchange
    cell_timeout_s: float = 600.0  # bound on a whole cell, warm-up included
    probe_timeout_s: float = 10.0
    slo_ms: dict[str, float] = field(default_factory=dict)  # servebench.slo names: {"p99_ttft_ms": 2000.0}
    seed: int = 0
    label: str | None = None
    target: str | None = None
    server_kv_cache: dict | None = None  # the KV cache the server logged allocating (`serve start` records it)

    def check(self) -> None:
        """BenchError naming the option of the first value that can't describe a sweep."""
        from crosstune.servebench.slo import check_slo

        def ints(option: str, values: list, least: int) -> None:
            if not values:
                raise BenchError(f"{option}: give at least one value")
            for v in values:
                if isinstance(v, bool) or not isinstance(v, int) or v < least:
                    raise BenchError(f"{option}: {v!r} is not an integer >= {least}")

        ints("--contexts", self.contexts, 1)
        if self.rates:
            for r in self.rates:
                if isinstance(r, bool) or not isinstance(r, int | float) or not math.isfinite(r) or r <= 0:
                    raise BenchError(
                        f"--rates: {r!r} is not a positive, finite request rate (req/s); for all requests at once "
                        "use --concurrency"
                    )
            if self.max_concurrency is not None:
                ints("--max-concurrency", [self.max_concurrency], 1)
        else:
            ints("--concurrency", self.concurrency, 1)
        ints("--output-len", [self.output_len], 1)
        ints("--num-requests", [self.num_requests], 1)
        ints("--warmup", [self.warmup], 0)
        ints("--seed", [self.seed], 0)
        for option, v in (
            ("--burstiness", self.burstiness),
            ("--timeout", self.timeout_s),
            ("--cell-timeout", self.cell_timeout_s),
            ("--probe-timeout", self.probe_timeout_s),
        ):
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
                raise BenchError(f"{option}: {v!r} is not a positive, finite number")
        if self.api not in ("completions", "chat"):
            raise BenchError(f"--api: {self.api!r} is not one of completions, chat")
        check_slo(self.slo_ms)
        if not str(self.endpoint).startswith(("http://", "https://")):
            raise BenchError(f"--endpoint {self.endpoint!r}: expected a base URL such as http://127.0.0.1:8000")

    def levels(self) -> list[tuple[int | None, float | None]]:
        if self.rates:
            return [(self.max_concurrency, r) for r in self.rates]
        return [(c, None) for c in self.concurrency]


def load_prompt_maker(cfg: SweepConfig) -> PromptMaker:
    """The tokenizer the prompts are built with, or a BenchError naming --tokenizer."""
    path = Path(cfg.tokenizer)
    if not path.is_dir():
        raise BenchError(f"--tokenizer {path}: no such folder (give the served model's folder, or its tokenizer's)")
    try:
        return PromptMaker(path, cfg.seed)
    except (OSError, ValueError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BenchError(f"--tokenizer {path}: no tokenizer can be loaded from it ({first})") from None


def probe(cfg: SweepConfig, maker: PromptMaker) -> dict:
    """GET /v1/models once, within probe_timeout_s: BenchError when nothing answers, the model is not served, or a
    context (+ output) exceeds the server's max_model_len. Returns what the server said of the model."""
    url = cfg.endpoint.rstrip("/") + "/v1/models"
    nothing_sent = "nothing was sent"
    try:
        r = httpx.get(url, timeout=cfg.probe_timeout_s)
    except httpx.ConnectError as e:
        raise BenchError(
            f"nothing listens at {cfg.endpoint} ({e}): is the server running and is --endpoint right? {nothing_sent}"
        ) from None
    except httpx.TimeoutException:
        raise BenchError(
            f"{url} did not answer within {cfg.probe_timeout_s:g} s (--probe-timeout): the server accepts "
            f"connections but does not answer; {nothing_sent}"
        ) from None
    except httpx.HTTPError as e:
        raise BenchError(f"{url}: {type(e).__name__}: {e}; {nothing_sent}") from None
    if r.status_code != 200:
        return {}  # it answers; a server without /v1/models may still serve completions
    try:
        cards = [c for c in r.json()["data"] if isinstance(c, dict)]
    except (ValueError, KeyError, TypeError):
        return {}
    served = [str(c.get("id")) for c in cards]
    card = next((c for c in cards if c.get("id") == cfg.model), None)
    if served and card is None:
        raise BenchError(f"{cfg.endpoint} serves {served}, not {cfg.model!r}: pass one of them as --model")
    card = card or {}
    limit = card.get("max_model_len") or next(
        (c.get("max_model_len") for c in cards if c.get("id") == card.get("parent")), None
    )
    if isinstance(limit, int) and limit > 0:
        overhead = maker.chat_overhead_tokens() if cfg.api == "chat" else 0
        too_long = [c for c in cfg.contexts if c + overhead + cfg.output_len > limit]
        if too_long:
            extra = f" + {overhead} chat-template tokens" if overhead else ""
            raise BenchError(
                f"context(s) {', '.join(map(str, too_long))}{extra} + {cfg.output_len} output tokens exceed the "
                f"max_model_len {limit} of {cfg.model!r} at {cfg.endpoint}: drop them from --contexts, or restart "
                f"the server with a larger --max-model-len; {nothing_sent}"
            )
    return card


async def _bounded(jobs: list, until: float) -> bool:
    """Run the coroutines until they finish or the monotonic time `until`; cancel what is left. True if cut."""
    tasks = [asyncio.ensure_future(j) for j in jobs]
    try:
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=max(0.0, until - time.monotonic()))
        else:
            pending = set()
        return bool(pending)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run_cell(
    client: httpx.AsyncClient, cfg: SweepConfig, maker: PromptMaker, ctx: int, conc: int | None, rate: float | None
) -> tuple[list[RequestRecord], float, dict | None, dict]:
    """One cell: warm-up (excluded), then the timed requests, all within cell_timeout_s. Returns the records, the
    duration, the server's /metrics scraped after the warm-up (its deltas cover the timed requests only) and what
    the warm-up did."""
    url = cfg.endpoint.rstrip("/") + ("/v1/chat/completions" if cfg.api == "chat" else "/v1/completions")
    until = time.monotonic() + cfg.cell_timeout_s
    bound = f"the cell's bound (--cell-timeout {cfg.cell_timeout_s:g} s) was reached"

    def make(i: int) -> tuple[dict, RequestRecord]:
        if cfg.api == "chat":
            text = maker.text_of_length(ctx)
            payload, expected = chat_payload(cfg.model, text, cfg.output_len), maker.chat_prompt_tokens(text)
        else:
            payload, expected = completion_payload(cfg.model, maker.ids_of_length(ctx), cfg.output_len), ctx
        return payload, RequestRecord(ctx, conc, rate, i, expected, cfg.output_len)

    async def guarded(payload: dict, record: RequestRecord, t_ref: float) -> None:
        try:
            await send(client, url, payload, record, t_ref, cfg.timeout_s)
        except asyncio.CancelledError:
            record.error = f"cut: {bound} mid-request"
            raise

    warm = [make(-1 - i) for i in range(cfg.warmup)]
    t_warm = time.perf_counter()
    await _bounded([guarded(p, r, t_warm) for p, r in warm], until)
    warm_failed = [r for _, r in warm if not r.ok]
    warmup = {"sent": len(warm), "failed": len(warm_failed)}
    if warm_failed:
        warmup["first_error"] = warm_failed[0].error or bound
    before = server_metrics.scrape(cfg.endpoint)
    jobs = [make(i) for i in range(cfg.num_requests)]
    if warm and len(warm_failed) == len(warm):
        for _, record in jobs:
            # "not sent" when the endpoint failed (the sweep may stop), "skipped" when the requests did (it goes on)
            kind = "not sent" if failure_kind(warmup["first_error"]) in ENDPOINT_FAILURES else "skipped"
            record.error = f"{kind}: every warm-up request failed (first: {warmup['first_error'][:200]})"
        return [r for _, r in jobs], 0.0, before, warmup
    offsets = arrival_times(len(jobs), rate if rate is not None else float("inf"), cfg.burstiness, cfg.seed + ctx)
    sem = asyncio.Semaphore(conc) if conc else None
    t0 = time.perf_counter()

    async def one(payload: dict, record: RequestRecord, offset: float) -> None:
        try:
            delay = t0 + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if sem is not None:
                await sem.acquire()
        except asyncio.CancelledError:
            record.error = f"not sent: {bound} first"
            raise
        try:
            await guarded(payload, record, t0)
        finally:
            if sem is not None:
                sem.release()

    await _bounded([one(p, r, o) for (p, r), o in zip(jobs, offsets, strict=True)], until)
    return [r for _, r in jobs], time.perf_counter() - t0, before, warmup


def _server_down(endpoint: str) -> str | None:
    try:
        r = httpx.get(endpoint.rstrip("/") + "/health", timeout=5.0)
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}"
    return None if r.status_code == 200 else f"/health answered {r.status_code}"


def new_summary(cfg: SweepConfig, model_card: dict | None = None) -> dict:
    return {
        "endpoint": cfg.endpoint,
        "model": cfg.model,
        "api": cfg.api,
        "label": cfg.label,
        "target": cfg.target,
        "output_len": cfg.output_len,
        "num_requests": cfg.num_requests,
        "warmup": cfg.warmup,
        "burstiness": cfg.burstiness,
        "timeout_s": cfg.timeout_s,
        "cell_timeout_s": cfg.cell_timeout_s,
        "slo_ms": cfg.slo_ms,
        "server_max_model_len": (model_card or {}).get("max_model_len"),
        "server_kv_cache": cfg.server_kv_cache,
        "cells": [],
        "saturation": {},
        "aborted": None,
        "interrupted": False,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def where(ctx: int, conc: int | None, rate: float | None) -> str:
    return f"context {ctx}, " + describe_load({"concurrency": conc, "request_rate": rate})


async def run_sweep(cfg: SweepConfig, out_dir: Path, progress: Callable[[str], None] | None = None) -> dict:
    """Check `cfg`, probe the endpoint, then every (context, level) cell in order; requests.jsonl and summary.json
    in `out_dir` are rewritten after each cell. Ctrl-C (cancellation) writes the finished cells, marks the summary
    interrupted and re-raises. `progress` gets one line per cell."""
    cfg.check()
    maker = load_prompt_maker(cfg)
    card = probe(cfg, maker)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = new_summary(cfg, card)
    jsonl = out_dir / "requests.jsonl"
    jsonl.write_text("")
    write_summary(summary, out_dir)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    current = "before the first cell"
    try:
        async with httpx.AsyncClient(limits=limits, timeout=cfg.timeout_s) as client:
            plan = [(ctx, conc, rate) for ctx in cfg.contexts for conc, rate in cfg.levels()]
            for i, (ctx, conc, rate) in enumerate(plan):
                current = where(ctx, conc, rate)
                load0 = os.getloadavg()[0]
                records, duration, before, warmup = await run_cell(client, cfg, maker, ctx, conc, rate)
                cell = summarize(records, duration, cfg.slo_ms or None)
                cell["warmup"] = warmup
                cell["load_avg_1m"] = [load0, os.getloadavg()[0]]
                cell["server"] = server_metrics.delta(before, server_metrics.scrape(cfg.endpoint))
                summary["cells"].append(cell)
                with jsonl.open("a") as fh:
                    for r in records:
                        fh.write(json.dumps(r.to_json()) + "\n")
                summary["saturation"] = saturation(summary["cells"])
                write_summary(summary, out_dir)
                if progress is not None:
                    progress(cell_line(cell))
                if why := _stop_reason(cfg, cell, current, last=i + 1 == len(plan)):
                    summary["aborted"] = why
                    write_summary(summary, out_dir)
                    return summary
    except asyncio.CancelledError:
        n = len(summary["cells"])
        summary["interrupted"] = True
        summary["aborted"] = (
            f"interrupted (Ctrl-C) during {current}: the {n} finished cell(s) are kept, the cell in progress "
            "was dropped"
        )
        write_summary(summary, out_dir)
        raise
    return summary


def _stop_reason(cfg: SweepConfig, cell: dict, current: str, last: bool) -> str | None:
    """Why the sweep can't go on after this cell (None: it can): the server is gone, or (with cells still to run)
    every request of the cell failed at the endpoint."""
    if not cell["failed"]:
        return None
    if why := _server_down(cfg.endpoint):
        return f"the server stopped answering after {current} ({why}); results so far are kept"
    kinds = set(cell["failures"])
    if not last and cell["completed"] == 0 and kinds and all(k in ENDPOINT_FAILURES for k in kinds):
        return (
            f"every request of {current} failed at the endpoint ({failure_text(cell)}): the server answers /health "
            "but not requests; the remaining cells were not run, results so far are kept"
        )
    return None


def failure_text(cell: dict) -> str:
    """'2 × HTTP 400 (first: HTTP 400: {...})'."""
    counts = ", ".join(f"{n} × {kind}" for kind, n in cell["failures"].items())
    first = cell.get("first_error")
    return f"{counts} (first: {first[:300]})" if first else counts


def cell_line(cell: dict) -> str:
    where_ = where(cell["context_len"], cell["concurrency"], cell["request_rate"])
    line = (
        f"{where_}: {cell['completed']} ok, {cell['failed']} failed, "
        f"{cell['output_throughput']:,.1f} output tok/s in {cell['duration_s']:.1f} s"
    )
    return line + (f" — {failure_text(cell)}" if cell["failed"] else "")


def empty_cells(summary: dict) -> list[str]:
    """One line per cell without a successful request, saying why."""
    return [
        f"{where(c['context_len'], c['concurrency'], c['request_rate'])}: no successful request: {failure_text(c)}"
        for c in summary["cells"]
        if c["completed"] == 0
    ]


def write_summary(summary: dict, out_dir: Path) -> Path:
    path = out_dir / "summary.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(path)
    return path
