"""The TPU step before and after `plan --search` in one run: the shipped recipe as it is (its search winner) against
the same recipe with the seed's step (remat on every decoder layer, dense attention), both compiled for the
recipe's TPU topology on this CPU (libtpu: make tpu-compile-env), and the ratio of their three-term rooflines.

    python bench/tpu_step.py recipes/gemma4-31b-tpu-v5p-8.yaml [--layers N] [--cache DIR]

Full depth of the 31B: two compiles of ~10-30 min and ~17 GB each, one after the other. --cache reuses the
compiles `plan --search --cache DIR` made (same key).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from crosstune.hardware import HARDWARE
from crosstune.plan.driver import cached_compile
from crosstune.planner import plan_recipe
from crosstune.planner.aot_report import roofline, with_layers
from crosstune.planner.planned_recipe import load_for_plan
from crosstune.units import bytes_to_gb, bytes_to_gib

SEED_STEP = ["train.gradient_checkpointing=true", "train.kernels.recompute=full", "backend.jax.attention=dense"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", type=Path)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args()
    recipe = load_for_plan(args.recipe)
    hw = HARDWARE[recipe.hardware]
    rows = {}
    for name, sets in (("seed step", SEED_STEP), ("recipe (search winner)", [])):
        step, _ = cached_compile(args.recipe, sets, args.layers, hw.name.removeprefix("tpu-"), args.cache)
        plan = plan_recipe(load_for_plan(args.recipe, sets), "jax")
        spec = with_layers(plan.spec, args.layers)
        planner = plan_recipe(load_for_plan(args.recipe, sets), "jax", spec=spec).jax_memory.total
        rows[name] = (step, roofline(step, hw.chip), planner)
    print(f"{recipe.name} on {hw.name}, {rows['seed step'][0].layers} of {rows['seed step'][0].model_layers} layers")
    print("| step | XLA GB/chip | planner GB/chip | compute s | HBM s | ICI s | tokens/s | compile s | host RSS GiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (step, line, planner) in rows.items():
        total = step.build_s + step.lower_s + step.compile_s
        print(
            f"| {name} | {bytes_to_gb(step.per_device_bytes):.2f} | {planner:.2f} | {line.compute_s:.3f} | "
            f"{line.memory_s:.3f} | {line.ici_s:.3f} | {line.tokens_per_s:,.0f} | {total:.0f} | "
            f"{bytes_to_gib(step.host_peak_rss_bytes):.1f} |"
        )
    ratio = rows["recipe (search winner)"][1].tokens_per_s / rows["seed step"][1].tokens_per_s
    print(f"ratio (winner / seed step, roofline tokens/s): {ratio:.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
