"""Small synthetic run directories, eval outputs and bench sweeps for the cost and report tests.

Run directories carry the records the trainers write (crosstune.run.metrics.StepMetrics, crosstune.run.records'
run.json, compile/checkpoint times included) with hand-picked numbers, so costs can be checked by hand.
Eval outputs are written by the evaluator's own `summarize` + `write_reports`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from crosstune.evals.judge.scoring import ProblemScore, summarize, write_reports
from crosstune.recipe.schema import Recipe
from crosstune.run.metrics import StepMetrics
from tests.helpers import paths
from tests.helpers.records import write_record

FIXTURES = paths.FIXTURES / "bench"
GPU_SWEEP, TPU_SWEEP = FIXTURES / "2xh100.summary.json", FIXTURES / "tpu-v6e-8.summary.json"


def write_run(
    root: Path,
    backend: str,
    hardware: str,
    *,
    steps: int = 20,
    step_time_s: float = 1.5,
    trained_tokens: int = 900,
    tokens: int = 1000,
    log_every: int = 1,
    loss0: float = 6.0,
    data_hash: str = "d" * 64,
    tokenizer_hash: str = "t" * 64,
    timing: bool = True,
    extra: dict | None = None,
) -> Path:
    """<root>/tiny-<backend>/ with run.json, recipe.yaml, metrics.jsonl and <root>/data/tiny/manifest.json."""
    run = root / f"tiny-{backend}"
    timings = {} if timing else {"compile_time_s": None, "checkpoint_time_s": None}
    write_record(
        run,
        backend,
        hardware=hardware,
        base=root / "model",
        data_hash=data_hash,
        prepared_dir=root / "data" / "tiny",
        steps=steps,
        total_steps=steps,
        **{**timings, **(extra or {})},
    )
    recipe = Recipe.model_validate(
        {
            "name": "tiny",
            "hardware": hardware,
            "model": {"family": "gemma4", "size": "tiny"},
            "data": {"sources": [{"path": "train.jsonl"}], "packing": True, "max_seq_len": 1024},
            "train": {"per_device_batch_size": 2, "grad_accumulation": 1, "max_steps": steps},
        }
    )  # resolved as training writes it (crosstune.run.rundir)
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False))
    rows = []
    for step in range(log_every, steps + 1, log_every):
        loss = loss0 * math.exp(-step / steps) + 0.5
        rows.append(
            StepMetrics(
                step=step,
                epoch=step / steps,
                loss=loss,
                learning_rate=1e-3,
                grad_norm=1.0,
                trained_tokens=trained_tokens,
                tokens=tokens,
                computed_tokens=tokens,  # packed rows: no padding computed
                step_time_s=step_time_s,
                trained_tokens_per_s=trained_tokens / step_time_s,
                tokens_per_s=tokens / step_time_s,
                peak_memory_gib=1.0,
                mfu=None,
                mfu_computed=None,
                hfu=None,
            )
        )
    (run / "metrics.jsonl").write_text("".join(json.dumps(r.model_dump()) + "\n" for r in rows))
    data = root / "data" / "tiny"
    data.mkdir(parents=True, exist_ok=True)
    (data / "manifest.json").write_text(json.dumps({"data_hash": data_hash, "tokenizer_hash": tokenizer_hash}))
    return run


def write_eval(out: Path, codes_per_problem: dict[str, str], ks=(1, 5), extra: dict | None = None) -> Path:
    """An evaluation output folder written by the evaluator's own summary code ('.' = pass); `extra` adds summary
    keys (engine, protocol)."""
    scores = [ProblemScore(name, list(codes)) for name, codes in codes_per_problem.items()]
    summary = summarize(scores, list(ks), "strict", {"task": "spec-to-rtl", **(extra or {})})
    write_reports(out, summary, [])
    return out


def served_by(run: Path, fixture: Path, dest: Path) -> Path:
    """A copy of a bench fixture that declares it served `run` (the `source` an export's manifest records)."""
    meta = json.loads((run / "run.json").read_text())
    summary = json.loads(fixture.read_text())
    summary["source"] = {
        "run_dir": str(run),
        "backend": meta["backend"],
        "recipe_hash": meta["recipe_hash"],
        "step": 20,
    }
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "summary.json").write_text(json.dumps(summary, indent=1))
    return dest / "summary.json"


def _demo_max_tokens() -> int:
    from crosstune.recipe import load_recipe
    from crosstune.recipes import shipped_recipe

    return load_recipe(shipped_recipe("demo-cpu.yaml")).eval.max_tokens


DEMO_MAX_TOKENS = _demo_max_tokens()  # the demo recipe's, read where it is set
PASS5_PROBLEMS = 8


def write_demo_evals(root: Path, pass1: dict[str, str], pass5: dict[str, str]) -> list[Path]:
    """Evaluation folders of two protocols per model, as the demo wrote them before it ran studies: a greedy pass on
    every held-out problem (n=1, T=0) and a 5-sample pass at T=0.8 on the first few, with the summary fields
    crosstune.evals.runner adds for a local model. `pass1` / `pass5`: model slug -> one code string per problem set."""
    from crosstune.evals.settings import EvalConfig, EvalOptions, EvalSettings

    out = []
    for slug in pass1:
        for kind, codes, n, temperature in (("greedy", pass1[slug], 1, 0.0), ("sampled", pass5[slug], 5, 0.8)):
            problems = [f"fam{i % 4}_{i:03d}" for i in range(len(codes) // n)]
            assert kind == "greedy" or len(problems) == PASS5_PROBLEMS
            scores = [ProblemScore(p, list(codes[i * n : (i + 1) * n])) for i, p in enumerate(problems)]
            options = EvalOptions(
                samples=n,
                k=(1, 5) if n >= 5 else (1,),
                temperature=temperature,
                top_p=0.95,
                max_tokens=DEMO_MAX_TOKENS,
                prompt_style="codev",
            )
            config = EvalConfig(
                problems=root / "corpus" / "eval",
                out=root / "eval" / f"{slug}-{kind}",
                hf_model=root / "models" / slug,
                settings=EvalSettings.resolve(options=options),
            )
            extra = {
                "problems_path": str(config.problems),
                "task": "spec-to-rtl",
                "model": str(config.hf_model),
                **config.summary_fields(),
            }
            write_reports(config.out, summarize(scores, list(config.settings.ks), "strict", extra), [])
            out.append(config.out)
    return out
