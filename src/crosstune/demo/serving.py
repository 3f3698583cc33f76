"""The demo's serving stage: start vLLM on what was trained, run a small sweep, stop — or, without the serving
environment, say the one command that creates it. The sweep and the port are the study's (crosstune.study.serving),
whose sweep is `bench serve`'s own (crosstune.servebench.bench.run_bench: manifest, empty-cell and aborted failures)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from crosstune.serve.engine import SERVE_ENV_COMMAND, vllm_binary
from crosstune.study.serving import free_port, sweep


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
    (after printing how to create it) when the serving environment is absent; BenchError when the sweep is no
    success, as `bench serve` exits 1."""
    if vllm_binary() is None:
        console.print(f"serving stage skipped: no serving environment; create it with `{SERVE_ENV_COMMAND}`")
        return None
    from crosstune.serve.process import start_server, stop_server

    state_dir = out_dir / "server"
    max_len = max(contexts) + output_len + 64
    console.print(f"serving {model_dir} with vLLM (start-up 30-120 s on CPU)...")
    try:
        state = start_server(
            model_dir, state_dir, name="demo", port=free_port(), max_model_len=max_len, adapter=adapter
        )
        return sweep(
            state, model_dir, out_dir / "bench", console, contexts=list(contexts), concurrency=list(concurrency),
            output_len=output_len, num_requests=num_requests, label="demo (vLLM CPU)", target="cpu",
        )  # fmt: skip
    finally:
        stop_server(state_dir)
