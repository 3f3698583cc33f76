"""The demo's last stages: score the base and both LoRA fine-tunes on the held-out problems, then cost and report.

Every model goes through the evaluator's own path (`run_eval` with a local transformers model): pass@1 greedy on
every held-out problem, pass@5 from 5 samples at temperature 0.8 on the first PASS5_PROBLEMS of them (sampling
costs five generations per problem; the greedy pass@1 is the number the demo's claim rests on). One engine (the
local transformers engine, same settings) generates for the base and both fine-tunes, so decoding differences
cannot enter the comparison; stage_eval checks the summaries agree on it and says so, and so does the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from crosstune.demo.context import DemoContext

console = Console()
PASS5_PROBLEMS = 8  # problems sampled 5 times for pass@5: 2 per held-out family (they cycle through the families)
# A 1.6M-parameter model's matmuls are too small to split across threads (6 greedy answers of the demo's fine-tune,
# one at a time: 5.4 s on 1 thread, 18.6 s on 2, on the 2 cores with a training job alongside); prompts are batched
# instead (evals/generation/local.py, docs/BENCHMARKS.md "Local generation").
GENERATION_THREADS = 1
# The held-out families' trained answers are at most 129 tokens in their <think></think><answer> markup (the
# recipe's answer_markup: tags; digits one per token); longer is a failure.
MAX_TOKENS = 144
# CPU has no price in the catalog; the demo prices its runs at an illustrative rate so the cost cells are filled.
ILLUSTRATIVE_CPU_USD_PER_HOUR = 0.10
ILLUSTRATIVE_SOURCE = "illustrative: a 2-vCPU cloud VM's order of magnitude, not a quote"


@dataclass(frozen=True)
class ModelScore:
    label: str
    model: Path
    greedy: dict  # the evaluator's summary.json of the greedy pass
    sampled: dict  # ... of the 5-sample pass

    @property
    def pass1(self) -> float:
        return float(self.greedy["pass_at_k"]["1"])

    @property
    def pass5(self) -> float | None:
        value = self.sampled["pass_at_k"].get("5")
        return None if value is None else float(value)


def evaluate_model(
    ctx: DemoContext, model: Path, out: Path, *, n: int, temperature: float, patterns: list[str] | None
) -> dict:
    """The evaluator's summary.json for `model` on the demo's held-out problems (codev prompts, local generation)."""
    from crosstune.evals import SamplingParams
    from crosstune.evals.runner import EvalConfig, run_eval
    from crosstune.pretrain.base_model import torch_threads

    # run_eval prints nothing: the demo shows one side-by-side table; each run's per-problem table is in summary.md.
    config = EvalConfig(
        problems=ctx.corpus_dir / "eval", out=out, task="spec-to-rtl", patterns=tuple(patterns or ()),
        hf_model=model, ks=(1, 5) if n >= 5 else (1,), prompt_style="codev", concurrency=1,
        sampling=SamplingParams(n=n, temperature=temperature, top_p=0.95, max_tokens=MAX_TOKENS, seed=ctx.seed),
    )  # fmt: skip
    with torch_threads(GENERATION_THREADS):
        report = run_eval(config)
    return report.summary


def score_model(ctx: DemoContext, label: str, slug: str, model: Path) -> ModelScore:
    """Greedy pass@1 on every problem, then pass@5 on the first PASS5_PROBLEMS, both under ctx.out/eval/."""
    problems = (ctx.corpus_dir / "eval" / "problems.txt").read_text().split()
    greedy = evaluate_model(ctx, model, ctx.out / "eval" / f"{slug}-greedy", n=1, temperature=0.0, patterns=None)
    subset = problems[:PASS5_PROBLEMS]
    sampled = evaluate_model(ctx, model, ctx.out / "eval" / f"{slug}-sampled", n=5, temperature=0.8, patterns=subset)
    return ModelScore(label, model, greedy, sampled)


def _categories(summary: dict) -> str:
    from crosstune.evals.judge.verdict import CATEGORIES

    counts = summary.get("categories", {})
    return ", ".join(f"{CATEGORIES.get(code, code)} {n}" for code, n in sorted(counts.items(), key=lambda x: -x[1]))


def comparison_table(scores: list[ModelScore]) -> Table:
    first = scores[0]
    table = Table(
        title=f"Held-out problems: pass@1 greedy on {first.greedy['problems']}, "
        f"pass@5 (5 samples, T=0.8) on {first.sampled['problems']}"
    )
    for col in ("model", "pass@1", "pass@5", "greedy verdicts (evaluator categories)"):
        table.add_column(col, overflow="fold")
    for s in scores:
        pass5 = "n/a" if s.pass5 is None else f"{s.pass5:.0%}"
        table.add_row(s.label, f"{s.pass1:.0%}", pass5, _categories(s.greedy))
    return table


def one_engine(scores: list[ModelScore]) -> str:
    """The engine every evaluation of the comparison used (their summary.json say); EvalError if they differ."""
    from crosstune.evals.runner import EvalError

    engines = {summary.get("engine", {}).get("name") for s in scores for summary in (s.greedy, s.sampled)}
    if len(engines) != 1 or None in engines:
        raise EvalError(f"the demo's evaluations were generated by different engines: {sorted(map(str, engines))}")
    return str(engines.pop())


def stage_eval(ctx: DemoContext) -> str:
    """Score the base and the two fine-tunes (both exported to merged HF models) on the same problems."""
    models = [
        ("base (pretrained, never saw these families)", "base", ctx.model_dir),
        ("LoRA fine-tune, torch", "torch-lora", ctx.out / "export-torch" / "merged"),
        ("LoRA fine-tune, jax", "jax-lora", ctx.out / "export" / "merged"),
    ]
    ctx.scores = [score_model(ctx, label, slug, model) for label, slug, model in models]
    engine = one_engine(ctx.scores)
    console.print(comparison_table(ctx.scores))
    console.print(f"   one engine for all three models: {engine} (local, greedy and sampled alike)", highlight=False)
    base, *tuned = ctx.scores
    for s in ctx.scores:
        ctx.made.append((f"eval: {s.label}", ctx.out / "eval", f"pass@1 {s.pass1:.0%}"))
    gains = ", ".join(f"{s.label.rsplit(' ', 1)[-1]} {100 * (s.pass1 - base.pass1):+.0f} pts" for s in tuned)
    return (
        f"pass@1 on {base.greedy['problems']} held-out problems: base {base.pass1:.0%} → "
        + " / ".join(f"{s.pass1:.0%}" for s in tuned)
        + f" after LoRA (torch / jax); gain {gains}; one engine: {engine}"
    )


def stage_report(ctx: DemoContext) -> str:
    """Training cost of both runs at an illustrative CPU price, then the report over runs and evaluations."""
    from crosstune.cost.costs import training_cost
    from crosstune.cost.prices import PriceBook
    from crosstune.report.writer import write_report
    from crosstune.run.layout import is_run_dir
    from crosstune.run.run_summary import read_run

    book = PriceBook().with_target_price("cpu", ILLUSTRATIVE_CPU_USD_PER_HOUR, ILLUSTRATIVE_SOURCE)
    runs = sorted(p for p in (ctx.out / "runs").iterdir() if is_run_dir(p))
    lines = []
    for run_dir in runs:
        cost = training_cost(read_run(run_dir), book)
        wall = "n/a" if cost.wall_cost is None else f"${cost.wall_cost:.5f} for the run"
        per_m = "n/a" if cost.usd_per_m_trained is None else f"${cost.usd_per_m_trained:.4f}"
        lines.append(f"{run_dir.name}: {wall}, {per_m} per million trained tokens")
    for line in lines:
        console.print("   " + line, markup=False, highlight=False)
    evals = sorted(p for p in (ctx.out / "eval").iterdir() if (p / "summary.json").is_file())
    html = write_report([*runs, *evals], ctx.out / "report", book=book)
    ctx.made.append(("report (report.md, report.html, charts/)", html.parent, "runs, costs and pass@k side by side"))
    ctx.report = html
    return f"cost at ${ILLUSTRATIVE_CPU_USD_PER_HOUR:.2f}/h for cpu ({ILLUSTRATIVE_SOURCE}); report: {html}"
