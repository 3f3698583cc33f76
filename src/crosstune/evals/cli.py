"""`crosstune eval`: VerilogEval v2 and RTLLM pass@k with iverilog, strict verdict, every sample sandboxed."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import typer
from rich.console import Console

from crosstune.errors import InputError
from crosstune.evals.generation.cache import SamplingParams
from crosstune.evals.generation.local import DEFAULT_BATCH_SIZE
from crosstune.evals.judge.sandbox import Limits
from crosstune.evals.problems.problem_sets import CODE_COMPLETE, RTLLM, SPEC_TO_RTL
from crosstune.evals.problems.protocols import PROTOCOLS, get_protocol
from crosstune.evals.runner import PARTIAL_EXIT_CODE, run_eval
from crosstune.evals.settings import (
    DEFAULT_SHOTS,
    EvalConfig,
    EvalError,
    EvalOptions,
    EvalSettings,
    protocol_tasks,
)
from crosstune.evals.show import progress_bars, show_report
from crosstune.recipe import load_recipe, resolve_path
from crosstune.recipe.schema import EVAL_DEFAULTS

console = Console()

EVAL_HELP = (
    "Evaluate Verilog generation on VerilogEval v2 (or a synthetic set in its layout) or RTLLM (v2.0 or v1.1 "
    "checkout; the layout is detected) with iverilog: pass@k with 95 % intervals, per-problem failure "
    "categories, summary.json and summary.md in --out.\n\n"
    "Give exactly one source of designs: --endpoint with --model (an OpenAI-compatible server such as "
    "vLLM), --hf-model (a local transformers model), --samples-file (existing completions) or "
    "--references-only (a self-check of the problem set).\n\n"
    "Every sample runs sandboxed (docs/EVAL_SANDBOX.md). Completions are cached in OUT/completions.jsonl, "
    "so an interrupted run (Ctrl-C) resumes without asking the model again. Before sending anything the "
    "endpoint is probed (GET /v1/models), so a dead server fails in seconds; every request has a deadline "
    "(--request-timeout). A sample that still fails is recorded with its reason, the report covers the "
    "completed samples, and the exit status is 3 (rerun to retry only those samples).\n\n"
    "Named protocols (--protocol) set n, k, temperature, top_p, the token budget, the prompt style, shots and the "
    "task list at once: " + "; ".join(f"{p.name}: {p.summary}" for p in PROTOCOLS.values()) + ". Explicit options "
    "override a protocol; summary.json records it and every departure. With a protocol and no --task, each of its "
    "tasks the checkout holds is evaluated into OUT/<task>.\n\n"
    "Example: crosstune eval --problems ~/verilog-eval --endpoint http://localhost:8000 --model gemma "
    "--n 5 --k 1,5 --temperature 0.8 --out runs/eval"
)


def register(app: typer.Typer) -> None:
    app.command("eval", help=EVAL_HELP)(eval_command)


def _parse_ks(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise EvalError(f"--k takes comma-separated integers like 1,5,10, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise EvalError(f"--k {text!r}: values must be >= 1")
    return ks


def eval_command(
    recipe: Path = typer.Argument(
        None,
        help="Optional recipe: its eval section (problems, samples, k, "
        "temperature, top_p, max_tokens, prompt_style, timeouts) gives the defaults.",
    ),
    problems: Path = typer.Option(
        None,
        "--problems",
        help="VerilogEval v2 checkout, one of its dataset_* "
        "folders, any folder holding problems.txt (e.g. a synthetic set), or an RTLLM "
        "checkout (v2.0 or v1.1), category folder or design folder.",
    ),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Output folder: summary.json, summary.md, samples.jsonl, "
        "the completion cache and the reference sample counts, listed in eval_manifest.json. "
        "Other files there are left alone; one of those names that the evaluator did not "
        "write is refused, by name.",
    ),
    task: str = typer.Option(
        None,
        "--task",
        help=f"{SPEC_TO_RTL} or {CODE_COMPLETE} (for a VerilogEval checkout) "
        f"[default: {SPEC_TO_RTL}, or every task of --protocol]; RTLLM has one ({RTLLM}).",
    ),
    protocol: str = typer.Option(
        None,
        "--protocol",
        help="A named evaluation protocol: "
        f"{', '.join(PROTOCOLS)} (see above) [default: recipe's eval.protocol, else none].",
    ),
    problem: list[str] = typer.Option(
        None,
        "--problem",
        help="Only problems matching this name or glob (repeatable, comma lists allowed), e.g. 'Prob00*'.",
    ),
    endpoint: str = typer.Option(None, "--endpoint", help="OpenAI-compatible server, e.g. http://localhost:8000."),
    model: str = typer.Option(None, "--model", help="Model name to request from --endpoint."),
    hf_model: Path = typer.Option(None, "--hf-model", help="Local transformers model folder (small models)."),
    samples_file: Path = typer.Option(
        None,
        "--samples-file",
        help='Score existing completions: JSONL of {"problem", "completion"[, "sample"]} (a completion cache works).',
    ),
    references_only: bool = typer.Option(
        False, "--references-only", help="Judge each reference as the design: a self-check of the problem set."
    ),
    n: int = typer.Option(None, "--n", help=f"Samples per problem [default: recipe, else {EVAL_DEFAULTS.samples}]."),
    k: str = typer.Option(
        None,
        "--k",
        help="pass@k values, comma-separated (each <= n) [default: recipe, else "
        f"those of {','.join(map(str, EVAL_DEFAULTS.k))} that n allows].",
    ),
    temperature: float = typer.Option(
        None,
        "--temperature",
        help=f"Sampling temperature (0 = greedy) [default: recipe, else {EVAL_DEFAULTS.temperature:g}].",
    ),
    top_p: float = typer.Option(
        None, "--top-p", help=f"Nucleus sampling mass [default: recipe, else {EVAL_DEFAULTS.top_p:g}]."
    ),
    max_tokens: int = typer.Option(
        None, "--max-tokens", help=f"Completion length limit [default: recipe, else {EVAL_DEFAULTS.max_tokens}]."
    ),
    seed: int = typer.Option(SamplingParams.seed, "--seed", help="Base seed; sample i uses seed + i."),
    prompt_style: str = typer.Option(
        None,
        "--prompt-style",
        help="verilogeval ([BEGIN]/[DONE], "
        "Question/Answer) or codev (<think> then ```verilog in <answer>) "
        f"[default: recipe, else {EVAL_DEFAULTS.prompt_style}].",
    ),
    shots: int = typer.Option(
        None, "--shots", help=f"In-context examples in the prompt (0-3) [default: protocol, else {DEFAULT_SHOTS}]."
    ),
    concurrency: int = typer.Option(EvalConfig.concurrency, "--concurrency", help="Parallel requests to the endpoint."),
    api_key_env: str = typer.Option(
        "OPENAI_API_KEY", "--api-key-env", help="Environment variable holding the endpoint's API key, if it needs one."
    ),
    upstream_compatible: bool = typer.Option(
        False,
        "--upstream-compatible",
        help="Count verdicts by "
        "VerilogEval v2's own rules (fooled by known fake passes) to "
        "compare with published numbers; default is the strict rule.",
    ),
    workers: int = typer.Option(None, "--workers", help="Parallel simulations (default: usable CPUs)."),
    timeout: float = typer.Option(
        Limits.timeout_s, "--timeout", help="Wall-clock seconds to judge one sample (all simulation steps)."
    ),
    connect_timeout: float = typer.Option(
        None,
        "--connect-timeout",
        help="Seconds to connect to "
        "--endpoint (also bounds the probe) "
        f"[default: recipe, else {EVAL_DEFAULTS.connect_timeout_s:g}].",
    ),
    read_timeout: float = typer.Option(
        None,
        "--read-timeout",
        help="Longest silence from --endpoint, "
        "in seconds (bounds one non-streamed generation) "
        f"[default: recipe, else {EVAL_DEFAULTS.read_timeout_s:g}].",
    ),
    request_timeout: float = typer.Option(
        None,
        "--request-timeout",
        help="Deadline of one request in "
        "seconds, however slowly the server sends "
        f"[default: recipe, else {EVAL_DEFAULTS.request_timeout_s:g}].",
    ),
    retries: int = typer.Option(
        EvalConfig.retries,
        "--retries",
        help="Extra attempts per sample after a "
        "connection error, a cut response, HTTP 429 or 5xx (backoff from 2 s, doubling); "
        "timeouts are not retried.",
    ),
    memory_mib: int = typer.Option(Limits.memory_mib, "--memory-mib", help="Address-space limit per process (MiB)."),
    batch_size: int = typer.Option(
        DEFAULT_BATCH_SIZE, "--batch-size", help="Prompts per generate() call of the local engine (--hf-model)."
    ),
) -> None:
    """Evaluate Verilog generation on VerilogEval v2 or RTLLM with iverilog (see EVAL_HELP). Over 80 lines for its
    options alone, one typer parameter each; the settings are resolved by evals.settings.EvalSettings.resolve."""
    section = None
    if recipe is not None:
        loaded = load_recipe(recipe)
        section, problems = loaded.eval, problems or resolve_path(loaded, loaded.eval.problems)
    if problems is None:
        raise EvalError("no problems to evaluate: give --problems DIR (or a RECIPE whose eval.problems names one)")
    options = EvalOptions(
        protocol=protocol,
        samples=n,
        k=None if k is None else _parse_ks(k),
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens,
        prompt_style=prompt_style,
        shots=shots,
        connect_timeout_s=connect_timeout,
        read_timeout_s=read_timeout,
        request_timeout_s=request_timeout,
        seed=seed,
    )
    settings = EvalSettings.resolve(section, options, problems)
    tasks = [task] if task is not None or settings.protocol is None else _tasks(settings.protocol, problems)
    _check_paths(out, hf_model)
    config = EvalConfig(
        problems=problems,
        out=out,
        patterns=tuple(problem or ()),
        endpoint=endpoint,
        model=model,
        hf_model=hf_model,
        samples_file=samples_file,
        references_only=references_only,
        settings=settings,
        concurrency=concurrency,
        api_key=os.environ.get(api_key_env) or None,
        upstream_compatible=upstream_compatible,
        workers=workers,
        limits=Limits(timeout_s=timeout, memory_mib=memory_mib),
        retries=retries,
        batch_size=batch_size,
    )
    partial = False
    for each in tasks:  # several: a protocol's tasks on one checkout, each into OUT/<task>
        partial |= _run(replace(config, task=each, out=out / each if len(tasks) > 1 and each else out))
    if partial:
        raise typer.Exit(PARTIAL_EXIT_CODE)


def _run(config: EvalConfig) -> bool:
    """Run and show one evaluation; whether some samples could not be generated."""
    with progress_bars(console) as on_progress:
        report = run_eval(config, on_progress)
    show_report(report, console)
    generation = report.summary_record.generation
    return generation is not None and generation.failed > 0


def _check_paths(out: Path, hf_model: Path | None) -> None:
    """Say which path is wrong before any work: transformers would read a missing folder as a hub model id."""
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file: give a folder (it is created if missing)")
    if hf_model is not None and not any((hf_model / f).is_file() for f in ("config.json", "adapter_config.json")):
        what = "has no config.json" if hf_model.is_dir() else "does not exist"
        raise InputError(f"--hf-model {hf_model} {what}: give a local transformers model folder (an export's merged/)")


def _tasks(name: str, problems: Path) -> list[str | None]:
    tasks = protocol_tasks(name, problems)
    if not tasks:
        raise EvalError(f"{problems} holds none of protocol {name}'s tasks ({', '.join(get_protocol(name).tasks)})")
    return tasks
