"""Two-backend loss curves: `crosstune train` on the tiny recipe with --backend torch and --backend jax from the same
seed (same initial LoRA, rows and hyper-parameters), step by step, next to the fp32 noise floor of ONE backend: a
second torch run that differs only in the attention kernel (eager instead of sdpa).

    .venv/bin/python bench/loss_curves.py                        # recipes/tiny-cpu.yaml: tiny Gemma 4, 30 steps
    .venv/bin/python bench/loss_curves.py --steps 6 --set train.learning_rate=5e-4 --set train.grad_accumulation=2
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="recipe override")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-loss-curves-") as tmp:
        run(Path(tmp), args)


def run(root: Path, args) -> None:
    import numpy as np
    import transformers
    from train_jax import setup

    from crosstune.data import prepare_dataset
    from crosstune.recipe import load_recipe
    from crosstune.train.session import train

    recipe = load_recipe(REPO / "recipes" / "tiny-cpu.yaml", [*setup(root, args.steps), *args.overrides])
    prepare_dataset(recipe)
    curves = {}
    curves["torch"] = train(recipe, root / "runs" / "torch", backend="torch", progress=False).losses
    curves["jax"] = train(recipe, root / "runs" / "jax", backend="jax", progress=False).losses
    load = transformers.AutoModelForCausalLM.from_pretrained
    transformers.AutoModelForCausalLM.from_pretrained = lambda *a, **k: load(*a, attn_implementation="eager", **k)
    curves["torch-eager"] = train(recipe, root / "runs" / "eager", backend="torch", progress=False).losses
    t, j, e = (np.array(curves[k]) for k in ("torch", "jax", "torch-eager"))
    print(f"lr {recipe.train.learning_rate}, accumulation {recipe.train.grad_accumulation}, {len(t)} steps")
    print("| step | torch | jax | \\|jax − torch\\| | \\|torch eager − torch sdpa\\| |")
    print("|---|---|---|---|---|")
    for s in range(len(t)):
        print(f"| {s + 1} | {t[s]:.6f} | {j[s]:.6f} | {abs(j[s] - t[s]):.1e} | {abs(e[s] - t[s]):.1e} |")
    print(f"max |jax − torch| {np.abs(j - t).max():.2e}; max |eager − sdpa| {np.abs(e - t).max():.2e}")


if __name__ == "__main__":
    main()
