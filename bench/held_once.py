"""The frozen base held once: XLA's per-device memory of the trainer's step (HeldOnceStep) against tunix 0.1.7's own
jit of the same step body (`nnx.jit(step, donate_argnames=("optimizer",))`), both compiled in this run for the
recipe's TPU topology from abstract weights (crosstune.train.jax.aot; libtpu from .venv-tpu-compile).

    .venv/bin/python bench/held_once.py                                   # Gemma 4 31B on v5p-8, first 2 layers
    .venv/bin/python bench/held_once.py --layers 6 --recipe recipes/gemma3-27b-tpu-v6e-8.yaml

It re-runs itself with libtpu on its path (never in the training environment) and prints one row per program and
the ratios of their outputs and totals. Each compile of the 31B's first 2 layers takes ~3 min and ~3.5 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _measure(recipe_path: Path, layers: int) -> list[dict]:
    from flax import nnx

    from crosstune.planner.planned_recipe import load_for_plan
    from crosstune.run.metrics import host_peak_rss_bytes
    from crosstune.train.parts import abstract_train_step
    from crosstune.units import bytes_to_gib

    abstract = abstract_train_step(load_for_plan(recipe_path), layers)
    programs = {
        "HeldOnceStep (crosstune)": abstract.step,
        "tunix 0.1.7 nnx.jit, optimizer donated": nnx.jit(
            abstract.trainer.create_train_step_fn(), donate_argnames=("optimizer",)
        ),
    }
    rows = []
    for name, program in programs.items():
        t0 = time.perf_counter()
        mem = abstract.memory(program)
        args, out, alias = mem.argument_size_in_bytes, mem.output_size_in_bytes, mem.alias_size_in_bytes
        total = args + out - alias + mem.temp_size_in_bytes + mem.generated_code_size_in_bytes
        rows.append(
            {
                "program": name,
                "device": abstract.device_kind,
                "arguments": args,
                "outputs": out,
                "alias": alias,
                "temp": mem.temp_size_in_bytes,
                "code": mem.generated_code_size_in_bytes,
                "total": total,
                "compile_s": time.perf_counter() - t0,
                "host_peak_rss_gib": bytes_to_gib(host_peak_rss_bytes()),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", type=Path, default=REPO / "recipes" / "gemma4-31b-tpu-v5p-8.yaml")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(args.recipe, args.layers)))
        return
    from crosstune.train.parts import tpu_child_env
    from crosstune.units import bytes_to_gb as gb

    cmd = [sys.executable, __file__, "--child", "--recipe", str(args.recipe), "--layers", str(args.layers)]
    out = subprocess.run(cmd, env=tpu_child_env("v5p-8"), capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr[-3000:])
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{args.recipe.name}, first {args.layers} layers, per device (GB), {rows[0]['device']}:")
    print(f"{'program':42} {'args':>7} {'outputs':>8} {'alias':>7} {'temp':>7} {'code':>6} {'total':>7} {'compile':>8}")
    for r in rows:
        print(
            f"{r['program']:42} {gb(r['arguments']):7.3f} {gb(r['outputs']):8.3f} {gb(r['alias']):7.3f} "
            f"{gb(r['temp']):7.3f} {gb(r['code']):6.3f} {gb(r['total']):7.3f} {r['compile_s']:7.0f}s"
        )
    ours, theirs = rows
    print(
        f"outputs / arguments: {ours['outputs'] / ours['arguments']:.3f} (crosstune) vs "
        f"{theirs['outputs'] / theirs['arguments']:.3f} (tunix); total {ours['total'] / theirs['total']:.3f}× "
        f"tunix's; host peak RSS {max(r['host_peak_rss_gib'] for r in rows):.1f} GiB"
    )


if __name__ == "__main__":
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5p-8")
    main()
