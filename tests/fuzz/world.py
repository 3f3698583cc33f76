"""The fuzzer's world: valid inputs every case starts from, built once per session and only read by the cases (each
case copies what it changes into its own tree; the recipe names the model as ../world/model).

model/ (the tiny Gemma 4, its tokenizer too), corpus/ (synthetic train.jsonl and a problem set), recipe.yaml,
data/train.jsonl and prepared/ (the recipe's data prepared), run/ (a torch run: run.json and a random adapter),
cost/ (runs with metrics as the trainers write them), eval/ (an evaluation's summary), bench/ (two sweeps), bundle/
(a study bundle with checkpoints) and workload.yaml.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.fuzz.harness import CROSSTUNE
from tests.helpers import bundles
from tests.helpers.export import torch_run
from tests.helpers.paths import FIXTURES, RECIPES
from tests.helpers.report import write_eval, write_run

TRAIN_ROWS = 24
PROBLEMS = 2
BUNDLE = "bundle"  # the study's --out name, and so its copy's name in a bucket


def recipe(extra_problems: str = "problems") -> dict:
    """recipes/tiny-cpu.yaml made small, its paths relative to a tree beside the world (../world/model)."""
    doc = yaml.safe_load((RECIPES / "tiny-cpu.yaml").read_text())
    doc["output_dir"] = "out/runs"
    doc["model"]["path"] = "../world/model"
    doc["data"].update(
        sources=[{"path": "data/train.jsonl"}],
        max_seq_len=256,
        truncation="truncate",
        prepared_dir="out/prepared",
        subsample={"size": TRAIN_ROWS, "seed": 0},
    )
    doc["train"].update(max_steps=1, checkpoint_every=1, per_device_batch_size=1)
    doc["eval"].update(problems=extra_problems, samples=1, k=[1], max_tokens=16)
    return doc


def build_world(root: Path, model_dir: Path, corpus_dir: Path) -> Path:
    """root/world (named so: its own recipe names ../world/model, as a case's does)."""
    world = root / "world"
    shutil.copytree(model_dir, world / "model")
    (world / "data").mkdir()
    rows = (corpus_dir / "train.jsonl").read_text().splitlines()[:TRAIN_ROWS]
    (world / "data" / "train.jsonl").write_text("\n".join(rows) + "\n")
    problems = world / "problems"
    problems.mkdir()
    names = (corpus_dir / "eval" / "problems.txt").read_text().split()[:PROBLEMS]
    (problems / "problems.txt").write_text("\n".join(names) + "\n")
    for name in names:
        for part in ("prompt.txt", "ref.sv", "test.sv"):
            shutil.copy(corpus_dir / "eval" / f"{name}_{part}", problems / f"{name}_{part}")
    doc = recipe()
    doc["data"]["prepared_dir"] = "prepared"
    (world / "recipe.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    subprocess.run([str(CROSSTUNE), "data", "prepare", "recipe.yaml"], cwd=world, check=True, capture_output=True)
    torch_run(world / "run", world / "model", "gemma4", rank=4, alpha=8.0)
    write_run(world / "cost", "torch", "2xh100")
    write_eval(world / "eval", {names[0]: ".", names[1]: "x"}, ks=(1,))
    (world / "bench").mkdir()
    for sweep in ("2xh100", "tpu-v6e-8"):
        (world / "bench" / sweep).mkdir()
        shutil.copy(FIXTURES / "bench" / f"{sweep}.summary.json", world / "bench" / sweep / "summary.json")
    bundles.bundle(world / BUNDLE, {"prepare": "done", "plan": "done", "train": "running"}, [1])
    workload = {
        "days": 30,
        "serve_tokens_per_day": 10_000_000,
        "options": {
            "assumed": {
                "train": {"target": "2xh100", "tokens": 9.2e6, "tokens_per_s": 486},
                "serve": {"target": "2xh100", "output_tokens_per_s": 800},
            },
            "measured": {
                "train": {"target": "tpu-v5p-8", "tokens": 9.2e6, "hours": 3.34},
                "serve": {"bench": "bench/tpu-v6e-8/summary.json"},
            },
        },
    }
    (world / "workload.yaml").write_text(yaml.safe_dump(workload, sort_keys=False))
    (world / "prices.yaml").write_text(
        "chips:\n  tpu-v5p: {on_demand: 2.9, spot: 1.1, source: fuzz, date: 2026-01-01}\n"
    )
    (world / "samples.jsonl").write_text(
        "".join(json.dumps({"problem": n, "completion": "module x; endmodule"}) + "\n" for n in names)
    )
    return world
