"""Serving in a study: vLLM on the merged export (crosstune.serve.process), started when the first stage needs it and
stopped when the study ends, the recipe's serve grid swept against it by `bench serve`'s own path
(crosstune.servebench.bench.run_bench: staged folder, manifest, the same failures); without a serving environment the
serve and bench stages are skipped, saying the one command that creates it."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from rich.console import Console

from crosstune.serve.engine import SERVE_ENV_COMMAND, vllm_binary
from crosstune.study.bundle import Output
from crosstune.study.context import BENCH, SERVE, StageResult, StudyContext

NO_SERVING = f"no vLLM serving environment: `{SERVE_ENV_COMMAND}` creates it (then rerun the study)"
REQUESTS_PER_LOAD = 2  # timed requests per cell: at least 16, and twice the cell's concurrency


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_grid(serve: Any) -> dict[str, Any]:
    """The grid a study sweeps: the recipe's serve.contexts / concurrency / output_tokens, or the named preset's
    (servebench.presets, `serve.preset: seed` gives the seed's table shape on any target)."""
    if serve.preset is None:
        return {
            "contexts": list(serve.contexts),
            "concurrency": list(serve.concurrency),
            "output_len": serve.output_tokens,
            "preset": None,
        }
    from crosstune.servebench.presets import get_preset

    grid = get_preset(serve.preset, "the recipe's serve.preset")
    return {
        "contexts": list(grid.contexts),
        "concurrency": list(grid.concurrency),
        "output_len": grid.output_len,
        "preset": grid.name,
    }


def sweep(
    state: Any,
    tokenizer: Path,
    out_dir: Path,
    console: Console,
    *,
    contexts: list[int],
    concurrency: list[int],
    output_len: int,
    num_requests: int,
    label: str,
    target: str,
    preset: str | None = None,
) -> dict:
    """The serve grid against a running server (`state`: serve.state.ServerState), as `bench serve` runs it
    (servebench.bench.run_bench): summary.json, requests.jsonl, plots and bench_manifest.json in `out_dir` (replacing
    only an earlier sweep), the table printed. BenchError when nothing succeeded, when the sweep was aborted or when a
    cell had no successful request — the cases where `bench serve` exits 1 — and Interrupted on Ctrl-C."""
    from crosstune.servebench.bench import run_bench
    from crosstune.servebench.bench_table import render_summary
    from crosstune.servebench.sweep import BenchError, SweepConfig

    cfg = SweepConfig(
        endpoint=state.base_url,
        model=state.lora_name or state.model,
        tokenizer=tokenizer,
        contexts=list(contexts),
        concurrency=list(concurrency),
        output_len=output_len,
        num_requests=num_requests,
        warmup=2,
        label=label,
        target=target,
        preset=preset,
        server_kv_cache=state.kv_cache,
        server_drafter=state.drafter,
    )
    result = run_bench(cfg, out_dir, overwrite=True, progress=lambda line: console.print("   " + line, markup=False))
    render_summary(result.summary, console)
    if result.problem:
        raise BenchError(f"{result.problem} (the sweep is kept in {out_dir})")
    return result.summary


class Server:
    """A vLLM process of the study: the merged export's, started on first use, stopped by `close` (the runner's
    finally), shared by serve, bench and eval; or another model's (the base, for eval-base)."""

    def __init__(self, s: StudyContext, model_dir: Path | None = None, state_rel: str = SERVE):
        self.s, self.state = s, None
        self.model_dir, self.state_rel = model_dir, state_rel  # model_dir None: the bundle's merged export

    @staticmethod
    def available() -> bool:
        return vllm_binary() is not None

    def engine(self) -> dict[str, Any]:
        """What serves the bundle's model (part of serve/bench/eval inputs: a new engine redoes them)."""
        exe = vllm_binary()
        return {"engine": "vllm", "binary": str(exe)} if exe else {"engine": None}

    def max_model_len(self) -> int:
        serve, ev = self.s.recipe.serve, self.s.recipe.eval
        grid = serve_grid(serve)
        return max(serve.max_model_len, max(grid["contexts"]) + grid["output_len"] + 64, ev.max_tokens + 1024)

    def start(self):
        if self.state is None:
            from crosstune.serve.process import start_server

            s, model = self.s, self.model_dir or self.s.merged_dir
            s.console.print(f"   starting vLLM on {model} (CPU build: 30-120 s to ready)")
            self.state = start_server(
                model,
                s.bundle / self.state_rel,
                name=s.recipe.name,
                port=free_port(),
                dtype=s.recipe.model.dtype,
                max_model_len=self.max_model_len(),
            )
        return self.state

    def close(self) -> None:
        if self.state is not None:
            from crosstune.serve.process import stop_server

            stop_server(self.s.bundle / self.state_rel)
            self.state = None


def serve_inputs(s: StudyContext) -> dict[str, Any]:
    """The serve settings and the engine (the merged export it serves is a stage it reads: runner.STAGES)."""
    return {"serve": s.section("serve", "hardware"), **s.server.engine()}


def target_plan(s: StudyContext) -> dict[str, Any]:
    """`crosstune serve plan` for the recipe's hardware (tp per layer type, KV capacity): the command that serves
    the merged model there, recorded whether or not this machine serves it."""
    from crosstune.serve.plan import SERVE_TARGETS, serve_plan

    if s.recipe.hardware not in SERVE_TARGETS:
        return {}
    plan = serve_plan(s.recipe, model_dir=s.merged_dir)
    layout = {"data_parallel_size": plan.dp, "tensor_parallel_size": plan.tp, "why": plan.choice}
    record = {"command": plan.command(), "docker": plan.docker, "blockers": plan.blockers, "layout": layout}
    return {"target_plan": record}


def run_serve(s: StudyContext) -> StageResult:
    if not s.server.available():
        return StageResult(NO_SERVING, status="skipped", record={"enable": SERVE_ENV_COMMAND, **target_plan(s)})
    state = s.server.start()
    log = str(Path(state.log).relative_to(s.bundle))
    return StageResult(
        f"vLLM ready at {state.base_url} (model {state.model}; log {log})",
        record={"max_model_len": s.server.max_model_len(), "log": log, **target_plan(s)},
    )


def bench_inputs(s: StudyContext) -> dict[str, Any]:
    return serve_inputs(s)


def run_bench(s: StudyContext) -> StageResult:
    if not s.server.available():
        note = f"nothing to benchmark: {NO_SERVING}"
        return StageResult(note, status="skipped", record={"enable": SERVE_ENV_COMMAND})
    from crosstune.servebench.sweep import BenchError

    grid = serve_grid(s.recipe.serve)
    try:
        summary = sweep(
            s.server.start(),
            s.merged_dir,
            s.bundle / BENCH,
            s.console,
            **grid,
            num_requests=max(16, REQUESTS_PER_LOAD * max(grid["concurrency"])),
            label=f"{s.recipe.name} · {s.backend} · {s.recipe.hardware}",
            target=s.recipe.hardware,
        )
    except BenchError as e:
        raise BenchError(f"{e} (server log: {s.bundle / SERVE})") from None
    cells = len(summary.get("cells", []))
    named = f"preset {grid['preset']}: " if grid["preset"] else ""
    return StageResult(
        f"{cells} cells ({named}contexts {grid['contexts']} × concurrency {grid['concurrency']})",
        [Output(f"{BENCH}/summary.json")],
        contents={"sweeps": [f"{BENCH}/summary.json"]},
    )
