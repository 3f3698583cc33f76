"""The jax step on an attached TPU, side by side in one process at one shape: Tunix's own LoRA loop as its examples
write it (the baseline), crosstune's step with Qwix's own LoRA branch (fp32 LoRA matmuls, threefry dropout: the step
before crosstune.train.jax.lora_provider), and crosstune's step as `crosstune train` runs it; the ratio of each to the
baseline, MFU (4N) and the devices' peak memory.

    python bench/tpu_chip_step.py recipes/gemma4-31b-tpu-v5p-8.yaml --layers 4 --set data.max_seq_len=4096 \
        --out results.json

The recipe's mesh is fitted to the attached chips (`hardware: auto`). A variant that doesn't fit the chip's memory
is reported as such, with XLA's message, and the others still run. Each variant runs in a process of its own (this
script again, with --variant): a device's peak memory counts from the process's start, so variants run one after
another in one process would each report the largest peak so far.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from crosstune.planner import plan_recipe
from crosstune.planner.aot_report import with_layers
from crosstune.planner.planned_recipe import load_for_plan
from crosstune.run.metrics import flops_utilisation
from crosstune.train.parts import measure_plain_tunix, measure_step
from crosstune.units import GB

VARIANTS = {  # the baseline last: a loop that can't fit the chip should not leave the others unmeasured
    "crosstune (as trained)": lambda r, n, s, profile=None: measure_step(r, n, steps=s, profile_dir=profile),
    "crosstune, Qwix's LoRA branch (the step before)": lambda r, n, s: measure_step(
        r, n, steps=s, lora_provider="qwix"
    ),
    "plain Tunix (PeftTrainer + Qwix LoRA, its examples)": lambda r, n, s: measure_plain_tunix(r, n, steps=s),
}
BASELINE = "plain Tunix (PeftTrainer + Qwix LoRA, its examples)"


def _run_here(args, recipe) -> int:
    """One variant in this process: its row (or its error) as JSON into --out."""
    try:
        extra = (args.profile,) if args.variant == list(VARIANTS)[0] else ()
        row = VARIANTS[args.variant](recipe, args.layers, args.steps, *extra)
    except Exception as e:  # noqa: BLE001 - an out-of-memory variant is a result: the others still run
        row = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    args.out.write_text(json.dumps(row, indent=1), encoding="utf-8")
    return 0


def _run_apart(name: str, args) -> dict:
    """The variant `name` run by this script in a child process (the same recipe, layers, --set lines, steps and
    profile), its row read back."""
    with tempfile.TemporaryDirectory(prefix="tpu-chip-step-") as tmp:
        out = Path(tmp) / "row.json"
        child = [sys.executable, __file__, str(args.recipe), "--steps", str(args.steps), "--variant", name]
        child += ["--out", str(out), *[a for o in args.overrides for a in ("--set", o)]]
        child += [] if args.layers is None else ["--layers", str(args.layers)]
        child += [] if args.profile is None else ["--profile", str(args.profile)]
        done = subprocess.run(child, check=False)
        if done.returncode != 0 or not out.is_file():
            return {"error": f"exit {done.returncode} (its last lines are above)"}
        return json.loads(out.read_text(encoding="utf-8"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", type=Path)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--only", action="append", default=None, help="run only variants whose name contains this")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--profile", type=Path, default=None, help="a JAX trace of one step of crosstune's step")
    parser.add_argument("--variant", default=None, help=argparse.SUPPRESS)  # run this one variant here
    args = parser.parse_args()
    recipe = load_for_plan(args.recipe, args.overrides + ["hardware=auto"])
    if args.variant is not None:
        return _run_here(args, recipe)
    plan = plan_recipe(recipe, "jax")
    spec = with_layers(plan.spec, args.layers)
    rows: dict[str, dict] = {}
    for name in VARIANTS:
        if args.only and not any(o in name for o in args.only):
            continue
        rows[name] = _run_apart(name, args)
        if args.out is not None:
            args.out.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    base = rows.get(BASELINE, {})
    base = base if "median_s" in base else None
    print(f"{recipe.name}, {spec.num_layers} layers, {recipe.data.max_seq_len} tokens per row, on {recipe.hardware}")
    print("| step | s / micro-step | tok/s | MFU (4N) | peak GB | × baseline |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        if "error" in r:
            print(f"| {name} | {r['error']} | | | | |")
            continue
        mfu = flops_utilisation(
            spec, r["micro_batch_tokens"], recipe.data.max_seq_len, r["median_s"], plan.hardware, 1, False
        )
        peak = "–" if r.get("peak_bytes") is None else f"{r['peak_bytes'] / GB:.2f}"
        ratio = "–" if base is None else f"{base['median_s'] / r['median_s']:.2f}"
        print(
            f"| {name} | {r['median_s']:.4f} | {r['micro_batch_tokens'] / r['median_s']:,.0f} | "
            f"{'–' if mfu is None else f'{mfu:.1%}'} | {peak} | {ratio} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
