"""`crosstune eval`: VerilogEval v2 pass@k with iverilog, strict verdict, every sample sandboxed."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console

from crosstune.errors import InputError
from crosstune.evals.cache import SamplingParams
from crosstune.evals.endpoint import Timeouts
from crosstune.evals.problems import CODE_COMPLETE, SPEC_TO_RTL
from crosstune.evals.runner import PARTIAL_EXIT_CODE, EvalConfig, EvalError, EvalInterrupted, run_eval
from crosstune.evals.sandbox import Limits
from crosstune.evals.show import progress_bars, show_report
from crosstune.recipe import RecipeError, load_recipe, resolve_path

console = Console()

EVAL_HELP = (
    "Evaluate Verilog generation on VerilogEval v2 (or a synthetic set in its layout) with iverilog: "
    "pass@k, per-problem failure categories, summary.json and summary.md in --out.\n\n"
    "Give exactly one source of designs: --endpoint with --model (an OpenAI-compatible server such as "
    "vLLM), --hf-model (a local transformers model), --samples-file (existing completions) or "
    "--references-only (a self-check of the problem set).\n\n"
    "Every sample runs sandboxed (docs/EVAL_SANDBOX.md). Completions are cached in OUT/completions.jsonl, "
    "so an interrupted run (Ctrl-C) resumes without asking the model again. Before sending anything the "
    "endpoint is probed (GET /v1/models), so a dead server fails in seconds; every request has a deadline "
    "(--request-timeout). A sample that still fails is recorded with its reason, the report covers the "
    "completed samples, and the exit status is 3 (rerun to retry only those samples).\n\n"
    "Example: crosstune eval --problems ~/verilog-eval --endpoint http://localhost:8000 --model gemma "
    "--n 5 --k 1,5 --temperature 0.8 --out runs/eval"
)


def register(app: typer.Typer) -> None:
    app.command("eval", help=EVAL_HELP)(eval_command)


def _parse_ks(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError as e:
        raise typer.BadParameter(f"--k takes comma-separated integers like 1,5,10, got {text!r}") from e
    if not ks or ks[0] < 1:
        raise typer.BadParameter("--k values must be >= 1")
    return ks


def eval_command(
    recipe: Path = typer.Argument(None, help="Optional recipe: its eval section (problems, samples, k, "
                                  "temperature, top_p, max_tokens, prompt_style, timeouts) gives the defaults."),
    problems: Path = typer.Option(None, "--problems", help="VerilogEval v2 checkout, one of its dataset_* "
                                  "folders, or any folder holding problems.txt (e.g. a synthetic set)."),
    out: Path = typer.Option(..., "--out", help="Output folder: summary.json, summary.md, samples.jsonl, "
                             "the completion cache and the reference sample counts."),
    task: str = typer.Option(SPEC_TO_RTL, "--task", help=f"{SPEC_TO_RTL} or {CODE_COMPLETE} (for a checkout)."),
    problem: list[str] = typer.Option(None, "--problem", help="Only problems matching this name or glob "
                                      "(repeatable, comma lists allowed), e.g. 'Prob00*'."),
    endpoint: str = typer.Option(None, "--endpoint", help="OpenAI-compatible server, e.g. http://localhost:8000."),
    model: str = typer.Option(None, "--model", help="Model name to request from --endpoint."),
    hf_model: Path = typer.Option(None, "--hf-model", help="Local transformers model folder (small models)."),
    samples_file: Path = typer.Option(None, "--samples-file", help="Score existing completions: JSONL of "
                                      '{"problem", "completion"[, "sample"]} (a completion cache works).'),
    references_only: bool = typer.Option(False, "--references-only", help="Judge each reference as the "
                                         "design: a self-check of the problem set."),
    n: int = typer.Option(None, "--n", min=1, help="Samples per problem [default: recipe, else 1]."),
    k: str = typer.Option(None, "--k", help="pass@k values, comma-separated (each <= n) [default: recipe, else 1]."),
    temperature: float = typer.Option(None, "--temperature", min=0.0, help="Sampling temperature (0 = greedy) "
                                      "[default: recipe, else 0]."),
    top_p: float = typer.Option(None, "--top-p", min=0.0, max=1.0, help="Nucleus sampling mass "
                                "[default: recipe, else 0.95]."),
    max_tokens: int = typer.Option(None, "--max-tokens", min=1, help="Completion length limit "
                                   "[default: recipe, else 1024]."),
    seed: int = typer.Option(0, "--seed", help="Base seed; sample i uses seed + i."),
    prompt_style: str = typer.Option(None, "--prompt-style", help="verilogeval ([BEGIN]/[DONE], "
                                     "Question/Answer) or codev (<think> then ```verilog in <answer>) "
                                     "[default: recipe, else verilogeval]."),
    shots: int = typer.Option(0, "--shots", min=0, help="In-context examples in the prompt (0-3)."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Parallel requests to the endpoint."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", help="Environment variable holding the "
                                    "endpoint's API key, if it needs one."),
    upstream_compatible: bool = typer.Option(False, "--upstream-compatible", help="Count verdicts by "
                                             "VerilogEval v2's own rules (fooled by known fake passes) to "
                                             "compare with published numbers; default is the strict rule."),
    workers: int = typer.Option(None, "--workers", min=1, help="Parallel simulations (default: usable CPUs)."),
    timeout: float = typer.Option(30.0, "--timeout", min=1.0, help="Wall-clock seconds to judge one sample (all "
                                 "simulation steps)."),
    connect_timeout: float = typer.Option(None, "--connect-timeout", min=0.01, help="Seconds to connect to "
                                          "--endpoint (also bounds the probe) [default: recipe, else 10]."),
    read_timeout: float = typer.Option(None, "--read-timeout", min=0.01, help="Longest silence from --endpoint, "
                                       "in seconds (bounds one non-streamed generation) [default: recipe, else 600]."),
    request_timeout: float = typer.Option(None, "--request-timeout", min=0.01, help="Deadline of one request in "
                                          "seconds, however slowly the server sends [default: recipe, else 1800]."),
    retries: int = typer.Option(5, "--retries", min=0, help="Extra attempts per sample after a connection error, "
                                "a cut response, HTTP 429 or 5xx (backoff from 2 s, doubling); timeouts are not "
                                "retried."),
    memory_mib: int = typer.Option(2048, "--memory-mib", min=64, help="Address-space limit per process (MiB)."),
) -> None:  # fmt: skip
    """Evaluate Verilog generation on VerilogEval v2 with iverilog (see EVAL_HELP)."""
    fallback = {"n": 1, "k": "1", "temperature": 0.0, "top_p": 0.95, "max_tokens": 1024, "prompt_style": "verilogeval",
                "connect_timeout": Timeouts.connect_s, "read_timeout": Timeouts.read_s,
                "request_timeout": Timeouts.request_s}  # fmt: skip
    if recipe is not None:
        problems, fallback = _recipe_defaults(recipe, problems, fallback)
    if problems is None:
        raise typer.BadParameter("give --problems DIR (or a RECIPE whose eval.problems names one)")
    n = fallback["n"] if n is None else n
    ks = _parse_ks(fallback["k"] if k is None else k)
    if references_only:
        n, ks = 1, [1]
    _check_paths(out, hf_model)
    try:
        config = EvalConfig(
            problems=problems,
            out=out,
            task=task,
            patterns=tuple(problem or ()),
            endpoint=endpoint,
            model=model,
            hf_model=hf_model,
            samples_file=samples_file,
            references_only=references_only,
            sampling=SamplingParams(
                n=n,
                temperature=fallback["temperature"] if temperature is None else temperature,
                top_p=fallback["top_p"] if top_p is None else top_p,
                max_tokens=fallback["max_tokens"] if max_tokens is None else max_tokens,
                seed=seed,
            ),
            ks=tuple(ks),
            prompt_style=fallback["prompt_style"] if prompt_style is None else prompt_style,
            shots=shots,
            concurrency=concurrency,
            api_key=os.environ.get(api_key_env) or None,
            upstream_compatible=upstream_compatible,
            workers=workers,
            limits=Limits(timeout_s=timeout, memory_mib=memory_mib),
            request_timeouts=Timeouts(
                connect_s=fallback["connect_timeout"] if connect_timeout is None else connect_timeout,
                read_s=fallback["read_timeout"] if read_timeout is None else read_timeout,
                request_s=fallback["request_timeout"] if request_timeout is None else request_timeout,
            ),
            retries=retries,
        )
    except EvalError as e:
        raise typer.BadParameter(str(e)) from None
    try:
        with progress_bars(console) as on_progress:
            report = run_eval(config, on_progress)
    except EvalInterrupted as e:
        console.print(str(e), style="yellow", markup=False)
        raise typer.Exit(e.exit_code) from None
    except EvalError as e:
        console.print(f"error: {e}", style="red", markup=False)  # a message may hold [brackets]
        raise typer.Exit(1) from None
    show_report(report, console)
    if report.summary.get("generation", {}).get("failed"):
        raise typer.Exit(PARTIAL_EXIT_CODE)


def _check_paths(out: Path, hf_model: Path | None) -> None:
    """Say which path is wrong before any work: transformers would read a missing folder as a hub model id."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file: give a folder (it is created if missing)")
    if hf_model is not None and not any((hf_model / f).is_file() for f in ("config.json", "adapter_config.json")):
        what = "has no config.json" if hf_model.is_dir() else "does not exist"
        raise InputError(f"--hf-model {hf_model} {what}: give a local transformers model folder (an export's merged/)")


def _recipe_defaults(recipe_file: Path, problems: Path | None, fallback: dict) -> tuple[Path | None, dict]:
    """The recipe's eval section as defaults; explicit options still win."""
    try:
        recipe = load_recipe(recipe_file)
    except RecipeError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(1) from None
    ev = recipe.eval
    defaults = {
        "n": ev.samples,
        "k": ",".join(str(k) for k in ev.k),
        "temperature": ev.temperature,
        "top_p": ev.top_p,
        "max_tokens": ev.max_tokens,
        "prompt_style": ev.prompt_style,
        "connect_timeout": ev.connect_timeout_s,
        "read_timeout": ev.read_timeout_s,
        "request_timeout": ev.request_timeout_s,
    }
    return (problems or resolve_path(recipe, ev.problems)), {**fallback, **defaults}
