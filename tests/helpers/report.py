"""Small synthetic run directories, eval outputs and bench sweeps for the cost and report tests.

Run directories carry the field names the trainers write (crosstune.run.metrics.StepMetrics, rundir.py's
run.json, the jax backend's compile/checkpoint times) with hand-picked numbers, so costs can be checked by hand.
Eval outputs are written by the evaluator's own `summarize` + `write_reports`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import yaml

from crosstune.evals.scoring import ProblemScore, summarize, write_reports
from crosstune.run.metrics import StepMetrics
from tests.helpers import paths

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
    run.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": 1,
        "backend": backend,
        "recipe_name": "tiny",
        "recipe_hash": "r" * 16,
        "family": "gemma4",
        "base_model": str(root / "model"),
        "dtype": "float32",
        "lora": {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": ["q", "k", "v", "o", "gate", "up", "down"]},
        "hardware": hardware,
        "versions": {"python": "3.11.2", backend: "1.0"},
        "precision": "fp32",
        "gradient_checkpointing": False,
        "steps": steps,
        **(extra or {}),
    }
    if timing:
        meta.update(compile_time_s=12.0, checkpoint_time_s=3.0, resumed_from_step=0)
    if backend == "jax":
        meta.update(mesh={"fsdp": 1, "tp": 2}, devices=2, global_batch=2)
    else:
        meta.update(world_size=1, lora_layout={"modules": 20, "targets_by_layer_type": {"sliding": ["q"]}})
    (run / "run.json").write_text(json.dumps(meta, indent=2))
    recipe = {
        "name": "tiny",
        "hardware": hardware,
        "model": {"family": "gemma4", "size": "tiny"},
        "data": {"packing": True, "max_seq_len": 1024},
        "train": {"per_device_batch_size": 2, "grad_accumulation": 1},
        "cost": {"price_per_hour": None},
    }
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe))
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
                peak_memory_gb=1.0,
                mfu=None,
                mfu_computed=None,
                hfu=None,
            )
        )
    (run / "metrics.jsonl").write_text("".join(json.dumps(asdict(r)) + "\n" for r in rows))
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
