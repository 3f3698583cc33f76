"""`crosstune serve plan|start|stop`; `crosstune bench serve|compare` live in servebench/cli.py (crosstune.commands
registers both)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from crosstune.serve.engine import ServeError

console = Console(soft_wrap=True)
serve_app = typer.Typer(help="Serve a model with vLLM: launch plans per target, start and stop a local server.")


def register(app: typer.Typer) -> None:
    app.add_typer(serve_app, name="serve")


@serve_app.command("plan")
def plan(
    recipe_file: Path = typer.Argument(..., help="recipe YAML"),
    target: str = typer.Option(
        None, "--target", help="a single-host target: 2xh100, 1xh200, tpu-v6e-8, tpu-v5p-8, cpu, … (default: recipe)"
    ),
    tp: int = typer.Option(
        None,
        "--tp",
        help="tensor parallel size (default: serve.tensor_parallel_size on the recipe's hardware, else the layout "
        "the plan's rule chooses)",
    ),
    dp: int = typer.Option(None, "--dp", help="data parallel replicas (default: the chips left over by --tp)"),
    kv_cache_dtype: str = typer.Option(None, "--kv-cache-dtype", help="auto or fp8 (default: serve.kv_cache_dtype)"),
    adapter: Path = typer.Option(None, "--adapter", help="a PEFT adapter directory to serve with --enable-lora"),
    name: str = typer.Option(
        None, "--name", help="served model name (default: the recipe's name on its hardware, else the model folder's)"
    ),
    draft: str = typer.Option(
        None,
        "--draft",
        help="speculative decoding with a Gemma 4 MTP drafter: `auto` (Google's drafter of this model, e.g. "
        "google/gemma-4-31B-it-assistant), a hub id, or a drafter folder (crosstune model tiny --assistant)",
    ),
    draft_tokens: int = typer.Option(
        None, "--draft-tokens", help="tokens drafted per step (num_speculative_tokens; default 1, vLLM's advice)"
    ),
) -> None:
    """The exact `vllm serve` command and docker line for a target, every flag explained: every dp × tp layout the
    target allows (heads checked per layer type, weights and KV capacity each), one chosen by a stated rule, and the
    KV-cache capacity for the dtype each chip really allocates. Exit 1 if it can't serve."""
    from crosstune.recipe import load_recipe
    from crosstune.serve.plan import SERVE_TARGETS, serve_plan
    from crosstune.serve.process import adapter_rank
    from crosstune.serve.render import render_serve_plan

    if target is not None and target not in SERVE_TARGETS:
        raise ServeError(f"--target {target!r}: one of {', '.join(SERVE_TARGETS)}")
    recipe = load_recipe(recipe_file)
    if adapter is not None and not (adapter / "adapter_config.json").is_file():
        raise ServeError(f"--adapter {adapter}: no adapter_config.json (expected a PEFT adapter, e.g. an export's)")
    rank = adapter_rank(adapter) if adapter else None
    drafter = _drafter(recipe, draft, draft_tokens) if draft is not None else None
    result = serve_plan(
        recipe,
        target,
        tp=tp,
        dp=dp,
        kv_dtype=kv_cache_dtype,
        adapter=adapter,
        adapter_rank=rank,
        name=name,
        drafter=drafter,
    )
    render_serve_plan(result, console)
    if not result.ok:
        raise typer.Exit(1)


def _drafter(recipe, draft: str, tokens: int | None):
    from crosstune.serve.drafter import resolve

    m = recipe.model
    try:
        return resolve(draft, family=m.family, size=m.size, model_path=m.path, tokens=tokens)
    except ValueError as e:
        raise ServeError(str(e)) from None


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
    state_dir: Path = typer.Option(
        None,
        "--state-dir",
        help="where the state file and log go (default: ~/.local/state/crosstune/serve/port-PORT, whatever the "
        "current folder; $CROSSTUNE_SERVE_STATE moves the root)",
    ),
    allow_template_mismatch: bool = typer.Option(
        False, "--allow-template-mismatch", help="serve even if the chat template differs from the training data's"
    ),
    draft: Path = typer.Option(
        None, "--draft", help="a Gemma 4 MTP drafter folder (crosstune model tiny --assistant): speculative decoding"
    ),
    draft_tokens: int = typer.Option(
        None, "--draft-tokens", help="tokens drafted per step (num_speculative_tokens; default 1, vLLM's advice)"
    ),
) -> None:
    """Start vLLM (CPU build, .venv-serve) in its own process group on a free port; returns when a 1-token
    completion answered by that process succeeded. A failed start shows the log's root cause and its path."""
    from crosstune.serve.process import check_model_dir, start_server
    from crosstune.serve.template import check_template, check_trained_template

    recipe = None
    if source.is_file():
        from crosstune.recipe import load_recipe, model_path

        recipe = load_recipe(source)
        model_dir = model_dir_opt or model_path(recipe)
        name = name or recipe.name
        port = port or recipe.serve.port
        dtype = dtype or recipe.model.dtype
        max_model_len = max_model_len or recipe.serve.max_model_len
    elif source.is_dir():
        model_dir = source
    else:
        raise ServeError(f"{source}: no such recipe file or model folder")
    if model_dir is None:
        raise ServeError(f"{source}: model.path is not set: pass --model-dir")
    if not Path(model_dir).is_dir():
        raise ServeError(f"{model_dir}: no such model folder")
    if adapter is not None and not adapter.is_dir():
        raise ServeError(f"--adapter {adapter}: no such folder (expected a PEFT adapter, e.g. an export's adapter/)")
    check_model_dir(Path(model_dir), adapters=adapter is not None)  # named before any tokenizer is loaded
    drafter = _start_drafter(Path(model_dir), draft, draft_tokens) if draft is not None else None
    problem = check_template(recipe, model_dir) if recipe is not None else None
    problem = problem or check_trained_template(model_dir, adapter if adapter is not None else model_dir)
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
        drafter=drafter,
    )
    models = state.model + (f", {state.lora_name}" if state.lora_name else "")
    console.print(f"[green]ready[/green] {state.base_url} (pid {state.pid}, models {models}); log {state.log}")


def _start_drafter(model_dir: Path, draft: Path, tokens: int | None):
    from crosstune.models.assistant import check_pair
    from crosstune.serve.drafter import DRAFT_TOKENS, Drafter

    if not (draft / "config.json").is_file():
        raise ServeError(f"--draft {draft}: no config.json (a drafter folder: crosstune model tiny --assistant BASE)")
    problems = check_pair(model_dir, draft)
    if problems:
        raise ServeError(f"--draft {draft} can't draft for {model_dir}: " + "; ".join(problems))
    return Drafter(str(draft.resolve()), tokens or DRAFT_TOKENS, "given by --draft")


@serve_app.command("stop")
def stop(
    port: int = typer.Option(None, "--port", help="the port the server was started on"),
    state_dir: Path = typer.Option(None, "--state-dir", help="the --state-dir it was started with"),
) -> None:
    """Stop the server: SIGTERM every process of it still proven to be the one started (its tree and process
    group, also after its main process was killed), SIGKILL after 30 s; remove its state file. Without --port or
    --state-dir: the one server recorded in the default state root."""
    from crosstune.serve.process import stop_server
    from crosstune.serve.state import default_state_dir, default_state_root, recorded_servers

    if state_dir is None and port is not None:
        state_dir = default_state_dir(port)
    if state_dir is None:
        found = recorded_servers()
        if not found:
            console.print(f"no server recorded in {default_state_root()}", highlight=False)
            return
        if len(found) > 1:
            raise ServeError(
                f"{len(found)} servers are recorded in {default_state_root()} "
                f"({', '.join(p.name for p in found)}): pass --port"
            )
        state_dir = found[0]
    console.print(stop_server(state_dir).message, highlight=False)
