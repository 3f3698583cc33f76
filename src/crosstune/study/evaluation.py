"""The study's last stages: pass@k of the fine-tune (crosstune.evals.runner: through the served model when vLLM
serves it, else the local transformers engine — one engine for the bundle, recorded), of the base at model.path
when asked (`--with eval-base`: the same engine, its own vLLM process when one serves), then cost (crosstune.cost:
training on the recipe's hardware, serving per context from the sweep)."""

from __future__ import annotations

import json
from typing import Any

from crosstune.fsutil import atomic_write_text
from crosstune.study.bundle import Output, StudyError
from crosstune.study.context import BASE, COST, EVAL, EXPORT, FINETUNE, StageResult, StudyContext
from crosstune.study.serving import Server
from crosstune.untrusted_files import read_text

LOCAL_CONCURRENCY, ENDPOINT_CONCURRENCY = 1, 8
NO_PROBLEMS = (
    "no eval.problems in the recipe, so nothing to score: set it to a VerilogEval v2 checkout or a "
    "problems.txt folder (--set eval.problems=PATH) and run the study again to evaluate"
)


def eval_inputs(s: StudyContext) -> dict[str, Any]:
    """The eval section, every problem file (by fingerprint: new files at the same path redo it) and the engine."""
    return {
        "eval": s.section("eval"),
        "problems": s.files(s.path(s.recipe.eval.problems), "eval.problems"),
        **_engine(s),
    }


def _engine(s: StudyContext) -> dict[str, Any]:
    served = s.server.engine()
    return served if served["engine"] else {"engine": "transformers"}


def _export_hash(s: StudyContext) -> str | None:
    """The merged export's sha256 as the export stage recorded it: the evaluated model's revision (cache key)."""
    return next((o.sha256 for o in s.outputs_of("export") if o.path == EXPORT), None)


def eval_folders(s: StudyContext) -> list[str]:
    return [f"{EVAL}/{FINETUNE}"]  # the completion cache too: a redo has other settings


def run_eval(s: StudyContext) -> StageResult:
    return _evaluate(s, FINETUNE, s.server, local=s.merged_dir, revision=_export_hash(s))


def eval_base_inputs(s: StudyContext) -> dict[str, Any]:
    """What eval reads, and the base's files instead of the export."""
    return {**eval_inputs(s), "model": s.files(s.model_path, "model.path")}


def eval_base_folders(s: StudyContext) -> list[str]:
    return [f"{EVAL}/{BASE}"]


def run_eval_base(s: StudyContext) -> StageResult:
    if s.model_path is None:
        raise StudyError("eval-base: the recipe's model has no model.path (a local HF checkpoint) to evaluate")
    server = Server(s, model_dir=s.model_path, state_rel=f"{EVAL}/{BASE}/server")  # stopped when the stage ends
    try:
        return _evaluate(s, BASE, server, local=s.model_path, revision=None)
    finally:
        server.close()


def _evaluate(s: StudyContext, name: str, server: Server, *, local, revision: str | None) -> StageResult:
    """pass@k of one model into eval/NAME: through `server` when vLLM serves, else `local` by transformers."""
    from crosstune.evals.runner import run_eval as evaluate
    from crosstune.evals.settings import EvalConfig, EvalSettings
    from crosstune.evals.show import progress_bars

    problems = s.path(s.recipe.eval.problems)
    if problems is None:  # never fail after the training a user paid for: say what evaluating needs
        return StageResult(NO_PROBLEMS, status="skipped")
    settings = EvalSettings.resolve(s.recipe.eval, problems=problems)  # as `crosstune eval RECIPE` resolves them
    engine = _engine(s)
    if engine["engine"] == "vllm":
        state = server.start()
        source: dict[str, Any] = {"endpoint": state.base_url, "model": state.model, "concurrency": ENDPOINT_CONCURRENCY}
    else:
        source = {"hf_model": local, "concurrency": LOCAL_CONCURRENCY}
    config = EvalConfig(
        problems=problems, out=s.bundle / EVAL / name, settings=settings, model_revision=revision, **source
    )
    with progress_bars(s.console) as on_progress:
        report = evaluate(config, on_progress)
    summary = report.summary
    pass_at_k = summary["pass_at_k"].items()
    passes = ", ".join(f"pass@{k} {'n/a' if v is None else f'{100 * v:.1f} %'}" for k, v in pass_at_k)
    rel = f"{EVAL}/{name}"
    generation = report.summary_record.generation
    cached = generation.from_cache if generation is not None and generation.from_cache is not None else 0
    return StageResult(
        f"{summary['problems']} problems × {settings.sampling.n} samples via {engine['engine']} ({cached} from the "
        f"cache): {passes}",
        [Output(f"{rel}/summary.json")],
        record={"engine": engine["engine"], "pass_at_k": summary["pass_at_k"]},
        contents={"evals": [rel]},
    )


def cost_inputs(s: StudyContext) -> dict[str, Any]:
    prices = read_text(s.prices) if s.prices else None  # the bounded reader: a FIFO, a folder, invalid UTF-8 named
    return {"cost": s.section("cost", "hardware"), "prices": prices}


def run_cost(s: StudyContext) -> StageResult:
    from crosstune.cost.costs import serving_costs, training_cost
    from crosstune.cost.prices import load_prices
    from crosstune.errors import InputError
    from crosstune.run.run_summary import read_run
    from crosstune.servebench.summary_cells import read_sweep

    book = load_prices(s.prices)
    record: dict[str, Any] = {"hardware": s.recipe.hardware, "training": None, "serving": [], "notes": []}
    try:
        c = training_cost(read_run(s.run_dir), book)
        record["training"] = {
            "price": c.price.describe(), "usd_per_hour": c.price.per_hour, "step_hours": c.step_hours,
            "usd": c.step_cost, "usd_with_compile_and_checkpoints": c.wall_cost,
            "usd_per_m_trained_tokens": c.usd_per_m_trained, "notes": c.notes,
        }  # fmt: skip
    except InputError as e:
        record["notes"].append(f"training: {e}")
    summary = s.bundle / "bench" / "summary.json"
    if s.manifest.status_of("bench") == "done" and summary.is_file():
        try:
            for sc in serving_costs(read_sweep(summary), book):
                record["serving"].append(
                    {
                        "context": sc.context_len,
                        "policy": sc.policy,
                        "usd_per_m_output": sc.usd_per_m_output,
                        "concurrency": None if sc.cell is None else sc.cell.concurrency,
                        "error": sc.error,
                    }
                )
        except InputError as e:
            record["notes"].append(f"serving: {e}")
    atomic_write_text(s.bundle / COST / "cost.json", json.dumps(record, indent=2) + "\n")
    t = record["training"]
    note = (
        f"training ${t['usd']:.4f} at {t['price']}"
        if t
        else f"not priced: no price for {s.recipe.hardware} (give one: --prices FILE or cost.price_per_hour)"
    )
    if record["serving"]:
        note += f"; serving priced at {len(record['serving'])} context(s)"
    return StageResult(note, [Output(f"{COST}/cost.json")])
