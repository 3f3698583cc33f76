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
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from crosstune.servebench import max_rate, prompt_cache, repeats, server_metrics, speculation
from crosstune.servebench.client import RequestRecord, chat_payload, completion_payload, send
from crosstune.servebench.request_metrics import describe_load, failure_kind, saturation, summarize
from crosstune.servebench.slo import cell_misses
from crosstune.servebench.sweep_config import BenchError, SweepConfig, fresh_seed
from crosstune.servebench.workload import PromptMaker, arrival_times
from crosstune.untrusted_files import parse_json

ENDPOINT_FAILURES = ("timeout", "refused", "dropped stream", "cut", "not sent")  # the server, not the request
__all__ = ["BenchError", "SweepConfig", "run_sweep"]  # the config and its error live in sweep_config


def load_prompt_maker(cfg: SweepConfig) -> PromptMaker:
    """The tokenizer the prompts are built with, or a BenchError naming --tokenizer."""
    path = Path(cfg.tokenizer)
    if not path.is_dir():
        raise BenchError(f"--tokenizer {path}: no such folder (give the served model's folder, or its tokenizer's)")
    return PromptMaker(path, cfg.seed or 0, cfg.prefix_reuse)  # names --tokenizer when transformers can't load it


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
        cards = [c for c in parse_json(r.content, f"{url} (its answer)")["data"] if isinstance(c, dict)]
    except (ValueError, KeyError, TypeError):  # not JSON within the reader's bounds, or not a model list
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
    """Run the coroutines until they finish or the event loop's time `until`; cancel what is left. True if cut."""
    tasks = [asyncio.ensure_future(j) for j in jobs]
    try:
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=max(0.0, until - asyncio.get_running_loop().time()))
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
    the warm-up did. Every time is the event loop's: the clock asyncio.sleep keeps the arrival schedule on."""
    url = cfg.endpoint.rstrip("/") + ("/v1/chat/completions" if cfg.api == "chat" else "/v1/completions")
    clock = asyncio.get_running_loop().time
    until = clock() + cfg.cell_timeout_s
    bound = f"the cell's bound (--cell-timeout {cfg.cell_timeout_s:g} s) was reached"

    def make(i: int) -> tuple[dict, RequestRecord]:
        if cfg.api == "chat":
            text = maker.text_of_length(ctx)
            payload, expected = chat_payload(cfg.model, text, cfg.output_len), maker.chat_prompt_tokens(text)
            prompt = text.encode()
        else:
            ids = maker.ids_of_length(ctx)
            payload, expected, prompt = (
                completion_payload(cfg.model, ids, cfg.output_len),
                ctx,
                json.dumps(ids).encode(),
            )
        record = RequestRecord(ctx, conc, rate, i, expected, cfg.output_len)
        record.prompt_sha256 = hashlib.sha256(prompt).hexdigest()[:16]  # which prompts a sweep sent, not the prompts
        return payload, record

    async def guarded(payload: dict, record: RequestRecord, t_ref: float) -> None:
        try:
            await send(client, url, payload, record, t_ref, cfg.timeout_s)
        except asyncio.CancelledError:
            record.error = f"cut: {bound} mid-request"
            raise

    warm = [make(-1 - i) for i in range(cfg.warmup)]
    t_warm = clock()
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
    offsets = arrival_times(
        len(jobs), rate if rate is not None else float("inf"), cfg.burstiness, (cfg.seed or 0) + ctx
    )
    sem = asyncio.Semaphore(conc) if conc else None
    t0 = clock()

    async def one(payload: dict, record: RequestRecord, offset: float) -> None:
        try:
            delay = t0 + offset - clock()
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
    return [r for _, r in jobs], clock() - t0, before, warmup


def _server_down(endpoint: str) -> str | None:
    """Why the server is gone (None: it answers). GET /health, or /v1/models on a server without that route (404):
    only a connection that fails or a 5xx answer is a server gone, never a healthy server whose requests failed."""
    base = endpoint.rstrip("/")
    try:
        r = httpx.get(base + "/health", timeout=5.0)
        if r.status_code == 404:
            r = httpx.get(base + "/v1/models", timeout=5.0)
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}"
    return None if r.status_code < 500 else f"{r.url.path} answered {r.status_code}"


def new_summary(cfg: SweepConfig, model_card: dict | None = None, seed_given: bool = True) -> dict:
    return {
        "endpoint": cfg.endpoint,
        "model": cfg.model,
        "api": cfg.api,
        "label": cfg.label,
        "target": cfg.target,
        "output_len": cfg.output_len,
        "preset": cfg.preset,
        "num_requests": cfg.num_requests,
        "warmup": cfg.warmup,
        "burstiness": cfg.burstiness,
        "timeout_s": cfg.timeout_s,
        "cell_timeout_s": cfg.cell_timeout_s,
        "slo_ms": cfg.slo_ms,
        "seed": cfg.seed,
        "seed_given": seed_given,
        "prefix_reuse": cfg.prefix_reuse,
        "prompt_cache": prompt_cache.workload_kind(cfg.prefix_reuse),
        "shared_prefix_tokens": {str(c): prompt_cache.shared_prefix_tokens(c, cfg.prefix_reuse) for c in cfg.contexts},
        "repeats": cfg.repeats,
        "server_max_model_len": (model_card or {}).get("max_model_len"),
        "server_kv_cache": cfg.server_kv_cache,
        "server_drafter": cfg.server_drafter,
        "cells": [],
        "saturation": {},
        "max_rate": None,
        "aborted": None,
        "interrupted": False,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def where(ctx: int, conc: int | None, rate: float | None) -> str:
    return f"context {ctx}, " + describe_load({"concurrency": conc, "request_rate": rate})


async def run_sweep(
    cfg: SweepConfig,
    out_dir: Path,
    progress: Callable[[str], None] | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> dict:
    """Check `cfg`, probe the endpoint, then every (context, level) cell in order — or, with find_max_rate, each
    context's rate search (servebench.max_rate); requests.jsonl and summary.json in `out_dir` are rewritten after each
    cell. The prompts' seed is cfg.seed, or a fresh one recorded in the summary. Ctrl-C (cancellation) writes the
    finished cells, marks the summary interrupted and re-raises. `progress` gets one line per cell. `transport`
    carries the timed requests (None: the network to cfg.endpoint, which the probe and /metrics always use): a test's
    server inside the event loop, whose waits run on the loop's clock."""
    cfg.check()
    seed_given = cfg.seed is not None
    cfg = dataclasses.replace(cfg, seed=cfg.seed if seed_given else fresh_seed())
    maker = load_prompt_maker(cfg)
    card = probe(cfg, maker)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = new_summary(cfg, card, seed_given)
    jsonl = out_dir / "requests.jsonl"
    jsonl.write_text("")
    write_summary(summary, out_dir)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    current = "before the first cell"
    try:
        async with httpx.AsyncClient(limits=limits, timeout=cfg.timeout_s, transport=transport) as client:

            async def measure(ctx: int, conc: int | None, rate: float | None, last: bool) -> dict | None:
                """One cell (all its repeats) into the summary; the cell, or None when the sweep must stop."""
                nonlocal current
                current = where(ctx, conc, rate)
                cell = await _cell(client, cfg, maker, ctx, conc, rate, jsonl)
                summary["cells"].append(cell)
                summary["saturation"] = saturation(summary["cells"])
                write_summary(summary, out_dir)
                if progress is not None:
                    progress(cell_line(cell))
                if why := _stop_reason(cfg, cell, current, last):
                    summary["aborted"] = why
                    write_summary(summary, out_dir)
                    return None
                return cell

            if cfg.find_max_rate:
                summary["max_rate"] = {}
                start = cfg.rates[0] if cfg.rates else max_rate.DEFAULT_START
                for ctx in cfg.contexts:
                    steps: list[max_rate.Step] = []
                    while (
                        rate := max_rate.next_rate(steps, start, cfg.rate_resolution, cfg.max_rate_steps)
                    ) is not None:
                        # a rate whose every request timed out is a miss, not a reason to stop: only a server gone is
                        cell = await measure(ctx, cfg.max_concurrency, rate, last=True)
                        if cell is None:
                            return summary
                        steps.append(
                            max_rate.Step(rate, not cell_misses(cell["completed"], cell["failed"], cell, cfg.slo_ms))
                        )
                        found = max_rate.result(steps, cfg.rate_resolution)
                        summary["max_rate"][str(ctx)] = found
                        write_summary(summary, out_dir)
                    if progress is not None:
                        progress(max_rate.describe(str(ctx), found))
                return summary
            plan = [(ctx, conc, rate) for ctx in cfg.contexts for conc, rate in cfg.levels()]
            for i, (ctx, conc, rate) in enumerate(plan):
                if await measure(ctx, conc, rate, last=i + 1 == len(plan)) is None:
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


async def _cell(
    client: httpx.AsyncClient,
    cfg: SweepConfig,
    maker: PromptMaker,
    ctx: int,
    conc: int | None,
    rate: float | None,
    jsonl: Path,
) -> dict:
    """Run a cell `cfg.repeats` times (records appended to `jsonl`, each with its repeat): the pooled cell with its
    server deltas, prefix-cache figures and, over several repeats, intervals (servebench.repeats)."""
    load0 = os.getloadavg()[0]
    pooled, duration, runs, server = [], 0.0, [], []
    for k in range(cfg.repeats):
        records, seconds, before, warmup = await run_cell(client, cfg, maker, ctx, conc, rate)
        after = server_metrics.scrape(cfg.endpoint)
        if cfg.repeats > 1:
            runs.append(repeats.headline(summarize(records, seconds, cfg.slo_ms or None)))
        pooled += records
        duration += seconds
        server.append((before, after))
        with jsonl.open("a") as fh:
            for r in records:
                fh.write(json.dumps({**r.to_json(), "repeat": k}) + "\n")
    cell = summarize(pooled, duration, cfg.slo_ms or None)
    cell["warmup"] = warmup
    cell["load_avg_1m"] = [load0, os.getloadavg()[0]]
    cell["server"] = server_metrics.deltas(server)
    cell["prefix_cache"] = prompt_cache.cell_cache(cell["server"], cfg.prefix_reuse)
    cell["speculation"] = speculation.cell_speculation(cell["server"], cfg.server_drafter)
    if cfg.repeats > 1:
        cell["repeats"] = runs
        cell["intervals"] = repeats.intervals(runs)
    return cell


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
    line += f"; {spec}" if (spec := speculation.line(cell)) else ""
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
