"""`crosstune serve plan|start|stop` and `crosstune bench serve|compare`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from crosstune.serve.engine import ServeError

console = Console(soft_wrap=True)
serve_app = typer.Typer(help="Serve a model with vLLM: launch plans per target, start and stop a local server.")
bench_app = typer.Typer(help="Benchmark a serving endpoint the way `vllm bench serve` does.")
DEFAULT_STATE_DIR = Path("runs/serve")


def register(app: typer.Typer) -> None:
    app.add_typer(serve_app, name="serve")
    app.add_typer(bench_app, name="bench")


@serve_app.command("plan")
def plan(
    recipe_file: Path = typer.Argument(..., help="recipe YAML"),
    target: str = typer.Option(None, "--target", help="2xh100, 1xh200, tpu-v6e-8, tpu-v5p-8 or cpu (default: recipe)"),
    tp: int = typer.Option(
        None,
        "--tp",
        help="tensor parallel size (default: serve.tensor_parallel_size on the recipe's hardware, all chips elsewhere)",
    ),
    kv_cache_dtype: str = typer.Option(None, "--kv-cache-dtype", help="auto or fp8 (default: serve.kv_cache_dtype)"),
    adapter: Path = typer.Option(None, "--adapter", help="a PEFT adapter directory to serve with --enable-lora"),
    name: str = typer.Option(
        None, "--name", help="served model name (default: the recipe's name on its hardware, else the model folder's)"
    ),
) -> None:
    """The exact `vllm serve` command and docker line for a target, every flag explained, tensor parallelism checked
    against each layer type's heads, and the KV-cache capacity per chip at bf16 and fp8. Exit 1 if it can't serve."""
    import json

    from crosstune.recipe import load_recipe
    from crosstune.serve.plan import SERVE_TARGETS, serve_plan
    from crosstune.serve.render import render_serve_plan

    if target is not None and target not in SERVE_TARGETS:
        raise typer.BadParameter(f"{target!r}: one of {', '.join(SERVE_TARGETS)}", param_hint="--target")
    recipe = load_recipe(recipe_file)
    rank = json.loads((adapter / "adapter_config.json").read_text())["r"] if adapter else None
    result = serve_plan(recipe, target, tp=tp, kv_dtype=kv_cache_dtype, adapter=adapter, adapter_rank=rank, name=name)
    render_serve_plan(result, console)
    if not result.ok:
        raise typer.Exit(1)


@serve_app.command("start")
def start(
    source: Path = typer.Argument(..., help="a recipe YAML (serves model.path) or a model directory (e.g. merged)"),
    adapter: Path = typer.Option(None, "--adapter", help="a PEFT adapter, served as NAME-lora (--enable-lora)"),
    model_dir_opt: Path = typer.Option(
        None, "--model-dir", help="with a recipe: serve this directory (e.g. the merged export) instead of model.path"
    ),
    name: str = typer.Option(None, "--name", help="served model name (default: recipe name or directory name)"),
    port: int = typer.Option(None, "--port", help="port on 127.0.0.1 (default: serve.port or 8000)"),
    dtype: str = typer.Option(None, "--dtype", help="float32 or bfloat16 (default: the recipe's model.dtype, float32)"),
    max_model_len: int = typer.Option(None, "--max-model-len", help="default: serve.max_model_len or 2048"),
    kv_cache_gib: int = typer.Option(
        1, "--kv-cache-gib", help="GiB for the KV cache (VLLM_CPU_KVCACHE_SPACE; unset, vLLM would take 0.9 × RAM)"
    ),
    state_dir: Path = typer.Option(DEFAULT_STATE_DIR, "--state-dir", help="where the PID/state file and log go"),
    allow_template_mismatch: bool = typer.Option(
        False, "--allow-template-mismatch", help="serve even if the chat template differs from the training data's"
    ),
) -> None:
    """Start vLLM (CPU build, .venv-serve) in its own process group; returns when a 1-token completion succeeds."""
    from crosstune.serve.process import start_server
    from crosstune.serve.template import check_export_template, check_template

    recipe = None
    if source.is_file():
        from crosstune.recipe import load_recipe, resolve_path

        recipe = load_recipe(source)
        model_dir = model_dir_opt or resolve_path(recipe, recipe.model.path)
        name = name or recipe.name
        port = port or recipe.serve.port
        dtype = dtype or recipe.model.dtype
        max_model_len = max_model_len or recipe.serve.max_model_len
    else:
        model_dir = source
    if model_dir is None:
        raise ServeError(f"{source}: model.path is not set: pass --model-dir")
    problem = check_template(recipe, model_dir) if recipe is not None else None
    problem = problem or check_export_template(model_dir)
    if problem:
        if not allow_template_mismatch:
            raise ServeError(problem + " (pass --allow-template-mismatch to serve anyway)")
        console.print(f"[bold red]WARNING[/bold red]: {problem}", highlight=False)
    state = start_server(
        model_dir,
        state_dir,
        name=name or model_dir.name,
        port=port or 8000,
        dtype=dtype or "float32",
        max_model_len=max_model_len or 2048,
        kv_cache_gib=kv_cache_gib,
        adapter=adapter,
    )
    models = state.model + (f", {state.lora_name}" if state.lora_name else "")
    console.print(f"[green]ready[/green] {state.base_url} (pid {state.pid}, models {models}); log {state.log}")


@serve_app.command("stop")
def stop(state_dir: Path = typer.Option(DEFAULT_STATE_DIR, "--state-dir")) -> None:
    """SIGTERM the server's process group (SIGKILL after 30 s) and remove its state file."""
    from crosstune.serve.process import stop_server

    console.print("stopped" if stop_server(state_dir) else f"no running server recorded in {state_dir}")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


@bench_app.command("serve")
def bench_serve(
    endpoint: str = typer.Option(..., "--endpoint", help="base URL, e.g. http://127.0.0.1:8000"),
    model: str = typer.Option(..., "--model", help="the served model name"),
    tokenizer: Path = typer.Option(..., "--tokenizer", help="the model's tokenizer directory (exact prompt lengths)"),
    contexts: str = typer.Option("128,512", "--contexts", help="prompt lengths in tokens, comma-separated"),
    concurrency: str = typer.Option("1,4", "--concurrency", help="concurrency levels, comma-separated"),
    rates: str = typer.Option(None, "--rates", help="request rates (req/s) instead of concurrency levels"),
    max_concurrency: int = typer.Option(None, "--max-concurrency", help="with --rates: requests in flight at most"),
    burstiness: float = typer.Option(1.0, "--burstiness", help="gamma shape of arrival gaps (1 = Poisson)"),
    output_len: int = typer.Option(32, "--output-len", help="exact output tokens per request (ignore_eos)"),
    num_requests: int = typer.Option(16, "--num-requests", help="timed requests per cell"),
    warmup: int = typer.Option(2, "--warmup", help="untimed requests before each cell"),
    api: str = typer.Option("completions", "--api", help="completions (token-id prompts) or chat"),
    timeout_s: float = typer.Option(120.0, "--timeout", help="per-request timeout, seconds"),
    slo: list[str] = typer.Option(None, "--slo", help="goodput SLO, e.g. --slo ttft=2000 --slo tpot=50 (ms)"),
    out: Path = typer.Option(Path("runs/bench"), "--out", help="output directory"),
    label: str = typer.Option(None, "--label"),
    target: str = typer.Option(None, "--target", help="hardware target name, for the cost report"),
) -> None:
    """Sweep context lengths × concurrency (or request rates): per-request JSONL, summary.json, plots."""
    import asyncio

    from crosstune.serve.report import write_plots
    from crosstune.serve.sweep import SweepConfig, run_sweep

    slo_ms = {}
    for item in slo or []:
        key, _, value = item.partition("=")
        if key not in ("ttft", "tpot", "e2el") or not value:
            raise typer.BadParameter(f"{item!r}: expected ttft=MS, tpot=MS or e2el=MS", param_hint="--slo")
        slo_ms[key] = float(value)
    if api not in ("completions", "chat"):
        raise typer.BadParameter("completions or chat", param_hint="--api")
    cfg = SweepConfig(
        endpoint=endpoint,
        model=model,
        tokenizer=tokenizer,
        contexts=_ints(contexts),
        concurrency=_ints(concurrency),
        rates=[float(x) for x in rates.split(",")] if rates else None,
        max_concurrency=max_concurrency,
        burstiness=burstiness,
        output_len=output_len,
        num_requests=num_requests,
        warmup=warmup,
        api=api,
        timeout_s=timeout_s,
        slo_ms=slo_ms,
        label=label,
        target=target,
    )
    summary = asyncio.run(run_sweep(cfg, out))
    write_plots(summary, out)
    render_summary(summary)
    console.print(f"wrote {out}/summary.json, {out}/requests.jsonl and plots")
    if summary["aborted"]:
        console.print(f"[red]aborted[/red]: {summary['aborted']}", highlight=False)
        raise typer.Exit(1)


def render_summary(summary: dict, out: Console | None = None) -> None:
    out = out or console
    t = Table(title=f"{summary['model']} @ {summary['endpoint']} ({summary['api']}, {summary['output_len']} out)")
    for col in (
        "ctx",
        "load",
        "ok/fail",
        "req/s",
        "out tok/s",
        "TTFT p50/p99 ms",
        "TPOT p50 ms",
        "E2EL p99 ms",
        "server TTFT p50 ms",
        "multi-tok chunks",
        "load avg",
    ):
        t.add_column(col, justify="right")

    def f(x, spec=",.1f"):
        return "–" if x is None else format(x, spec)

    for c in summary["cells"]:
        level = c["concurrency"] if c["request_rate"] is None else f"{c['request_rate']}/s"
        server = c.get("server") or {}
        t.add_row(
            str(c["context_len"]),
            str(level),
            f"{c['completed']}/{c['failed']}",
            f(c["request_throughput"], ".2f"),
            f(c["output_throughput"]),
            f"{f(c['median_ttft_ms'])}/{f(c['p99_ttft_ms'])}",
            f(c["median_tpot_ms"]),
            f(c["p99_e2el_ms"]),
            f(server.get("median_ttft_ms")),
            f(c["chunks"]["multi_token_chunk_share"], ".0%"),
            f(c["load_avg_1m"][1], ".1f"),
        )
    out.print(t)
    for ctx, s in summary["saturation"].items():
        out.print(
            f"saturation at context {ctx}: concurrency {s['concurrency']} → {s['output_throughput']:,.1f} output tok/s",
            highlight=False,
        )


@bench_app.command("compare")
def compare(
    a: Path = typer.Argument(..., help="summary.json (or its directory)"), b: Path = typer.Argument(...)
) -> None:
    """Two sweeps side by side per (context, level), with B/A ratios."""
    from crosstune.serve.report import compare_rows, load_summary

    try:
        sa, sb = load_summary(a), load_summary(b)
    except ValueError as e:
        raise ServeError(str(e)) from None
    rows = compare_rows(sa, sb)
    if not rows:
        raise ServeError(f"{a} and {b} share no (context, concurrency/rate) cell")
    t = Table(title=f"A = {sa.get('label') or a}   B = {sb.get('label') or b}")
    for col in ("ctx", "load", "metric", "A", "B", "B/A"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            str(r["context_len"]),
            str(r["level"]),
            r["metric"],
            _num(r["a"]),
            _num(r["b"]),
            "–" if r["ratio"] is None else f"{r['ratio']:.2f}×",
        )
    console.print(t)


def _num(x) -> str:
    return "–" if x is None else f"{x:,.2f}"
