"""The demo's serving stage: start vLLM on what was trained, run a small sweep, stop — or, without the serving
environment, say the one command that creates it."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from rich.console import Console

from crosstune.serve.engine import SERVE_ENV_COMMAND, vllm_binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serving_stage(
    model_dir: Path,
    out_dir: Path,
    console: Console,
    *,
    adapter: Path | None = None,
    contexts: tuple[int, ...] = (128, 512),
    concurrency: tuple[int, ...] = (1, 4),
    output_len: int = 32,
    num_requests: int = 8,
) -> dict | None:
    """Serve `model_dir` (+ `adapter`, benchmarked when given) with vLLM, sweep, stop. Returns the summary, or None
    (after printing how to create it) when the serving environment is absent."""
    if vllm_binary() is None:
        console.print(f"serving stage skipped: no serving environment; create it with `{SERVE_ENV_COMMAND}`")
        return None
    from crosstune.serve.process import start_server, stop_server
    from crosstune.serve.report import write_plots
    from crosstune.serve.sweep import SweepConfig, run_sweep

    state_dir = out_dir / "server"
    max_len = max(contexts) + output_len + 64
    console.print(f"serving {model_dir} with vLLM (start-up 30-120 s on CPU)...")
    try:
        state = start_server(
            model_dir, state_dir, name="demo", port=_free_port(), max_model_len=max_len, adapter=adapter
        )
        cfg = SweepConfig(
            endpoint=state.base_url,
            model=state.lora_name or state.model,
            tokenizer=model_dir,
            contexts=list(contexts),
            concurrency=list(concurrency),
            output_len=output_len,
            num_requests=num_requests,
            warmup=2,
            label="demo (vLLM CPU)",
            target="cpu",
        )
        summary = asyncio.run(run_sweep(cfg, out_dir / "bench"))
    finally:
        stop_server(state_dir)
    write_plots(summary, out_dir / "bench")
    from crosstune.serve.bench_cli import render_summary

    render_summary(summary, console)
    return summary
