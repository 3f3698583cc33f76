"""The host's time to build and lower a recipe's jax step (everything before XLA compiles it) with crosstune's
linear tracing (crosstune.train.jax.tracing) and without it, each in a process of its own, for the recipe's TPU
topology as `plan --compile` builds it (libtpu in the TPU compile environment, `make tpu-compile-env`); the ratio.

    python bench/trace_time.py recipes/gemma4-31b-tpu-v5p-8.yaml --layers 12 24 60
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path


def measure(recipe: str, layers: int, linear: bool) -> dict:
    """{"build_s", "lower_s"} of the recipe's step at `layers` layers; `linear` False: jax's own Tracer probes."""
    from crosstune.planner.planned_recipe import load_for_plan
    from crosstune.train.parts import abstract_train_step, jax_own_tracer_probes

    r = load_for_plan(Path(recipe), [])
    with contextlib.nullcontext() if linear else jax_own_tracer_probes():
        abstract_train_step(r, 1)  # libtpu's topology and the imports, outside the timing
        t0 = time.perf_counter()
        step = abstract_train_step(r, layers)
        t1 = time.perf_counter()
        step.lower()
    return {"build_s": t1 - t0, "lower_s": time.perf_counter() - t1}


def _child(recipe: str, layers: int, linear: bool, env: dict) -> dict:
    cmd = [sys.executable, __file__, recipe, "--child", str(layers), "on" if linear else "off"]
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe")
    parser.add_argument("--layers", type=int, nargs="+", default=[12, 24])
    parser.add_argument("--child", nargs=2, metavar=("LAYERS", "on|off"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.recipe, int(args.child[0]), args.child[1] == "on")))
        return 0
    from crosstune.plan.driver import tpu_hardware
    from crosstune.planner.planned_recipe import load_for_plan
    from crosstune.train.parts import tpu_child_env

    hw = tpu_hardware(load_for_plan(Path(args.recipe), []), "bench/trace_time.py")
    env = tpu_child_env(hw.name.removeprefix("tpu-"))
    print("| layers | build s, jax's probes | build s, linear | lower s, jax's probes | lower s, linear | ratio |")
    print("|---|---|---|---|---|---|")
    for layers in args.layers:
        before, after = (_child(args.recipe, layers, linear, env) for linear in (False, True))
        ratio = (before["build_s"] + before["lower_s"]) / (after["build_s"] + after["lower_s"])
        print(
            f"| {layers} | {before['build_s']:.1f} | {after['build_s']:.1f} | {before['lower_s']:.1f} | "
            f"{after['lower_s']:.1f} | {ratio:.1f}× |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
