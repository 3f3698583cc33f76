"""`crosstune bench serve`: a sweep of context lengths × concurrency levels (or request rates) against one
OpenAI-compatible endpoint, warm-up excluded, writing per-request JSONL, a summary JSON and plots.

Each cell: `warmup` requests first (not timed), then `num_requests` dispatched at their arrival times with at most
`concurrency` in flight (a semaphore: a finished request frees its slot at once — never batch-synchronous).
A server that stops answering /health ends the sweep with a clear message; everything measured so far is written.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from crosstune.serve import server_metrics
from crosstune.serve.client import RequestRecord, chat_payload, completion_payload, send
from crosstune.serve.metrics import saturation, summarize
from crosstune.serve.workload import PromptMaker, arrival_times


@dataclass
class SweepConfig:
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
    timeout_s: float = 120.0
    slo_ms: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    label: str | None = None
    target: str | None = None


def _levels(cfg: SweepConfig) -> list[tuple[int | None, float | None]]:
    if cfg.rates:
        return [(cfg.max_concurrency, r) for r in cfg.rates]
    return [(c, None) for c in cfg.concurrency]


async def run_cell(
    client: httpx.AsyncClient, cfg: SweepConfig, maker: PromptMaker, ctx: int, conc: int | None, rate: float | None
) -> tuple[list[RequestRecord], float, dict | None]:
    """One cell: warm-up (excluded), then the timed requests. Returns the records, the duration and the server's
    /metrics scraped after the warm-up (so its deltas cover the timed requests only)."""
    url = cfg.endpoint.rstrip("/") + ("/v1/chat/completions" if cfg.api == "chat" else "/v1/completions")

    def make(i: int) -> tuple[dict, RequestRecord]:
        if cfg.api == "chat":
            text = maker.text_of_length(ctx)
            payload, expected = chat_payload(cfg.model, text, cfg.output_len), maker.chat_prompt_tokens(text)
        else:
            payload, expected = completion_payload(cfg.model, maker.ids_of_length(ctx), cfg.output_len), ctx
        return payload, RequestRecord(ctx, conc, rate, i, expected, cfg.output_len)

    warm = [make(-1 - i) for i in range(cfg.warmup)]
    t_warm = time.perf_counter()
    await asyncio.gather(*(send(client, url, p, r, t_warm, cfg.timeout_s) for p, r in warm))
    before = server_metrics.scrape(cfg.endpoint)
    jobs = [make(i) for i in range(cfg.num_requests)]
    offsets = arrival_times(len(jobs), rate if rate is not None else float("inf"), cfg.burstiness, cfg.seed + ctx)
    sem = asyncio.Semaphore(conc) if conc else None
    t0 = time.perf_counter()

    async def one(payload: dict, record: RequestRecord, offset: float) -> RequestRecord:
        delay = t0 + offset - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if sem is None:
            return await send(client, url, payload, record, t0, cfg.timeout_s)
        async with sem:
            return await send(client, url, payload, record, t0, cfg.timeout_s)

    records = await asyncio.gather(*(one(p, r, o) for (p, r), o in zip(jobs, offsets, strict=True)))
    return list(records), time.perf_counter() - t0, before


def _server_down(endpoint: str) -> str | None:
    try:
        r = httpx.get(endpoint.rstrip("/") + "/health", timeout=5.0)
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}"
    return None if r.status_code == 200 else f"/health answered {r.status_code}"


async def run_sweep(cfg: SweepConfig, out_dir: Path) -> dict:
    """Every (context, level) cell in order; requests.jsonl and summary.json are rewritten after each cell."""
    out_dir.mkdir(parents=True, exist_ok=True)
    maker = PromptMaker(cfg.tokenizer, cfg.seed)
    summary: dict = {
        "endpoint": cfg.endpoint,
        "model": cfg.model,
        "api": cfg.api,
        "label": cfg.label,
        "target": cfg.target,
        "output_len": cfg.output_len,
        "num_requests": cfg.num_requests,
        "warmup": cfg.warmup,
        "burstiness": cfg.burstiness,
        "slo_ms": cfg.slo_ms,
        "cells": [],
        "saturation": {},
        "aborted": None,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    jsonl = out_dir / "requests.jsonl"
    jsonl.write_text("")
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=cfg.timeout_s) as client:
        for ctx in cfg.contexts:
            for conc, rate in _levels(cfg):
                load0 = os.getloadavg()[0]
                records, duration, before = await run_cell(client, cfg, maker, ctx, conc, rate)
                cell = summarize(records, duration, cfg.slo_ms or None)
                cell["load_avg_1m"] = [load0, os.getloadavg()[0]]
                cell["server"] = server_metrics.delta(before, server_metrics.scrape(cfg.endpoint))
                summary["cells"].append(cell)
                with jsonl.open("a") as fh:
                    for r in records:
                        fh.write(json.dumps(r.to_json()) + "\n")
                summary["saturation"] = saturation(summary["cells"])
                write_summary(summary, out_dir)
                if cell["failed"] and (why := _server_down(cfg.endpoint)):
                    summary["aborted"] = (
                        f"the server stopped answering after cell context={ctx} concurrency={conc} rate={rate} "
                        f"({why}); results so far are kept"
                    )
                    write_summary(summary, out_dir)
                    return summary
    return summary


def write_summary(summary: dict, out_dir: Path) -> Path:
    path = out_dir / "summary.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(path)
    return path
