"""`crosstune plan --run` over several recipes' shapes in one process on an attached TPU: each shape's measured step
(time, tok/s, MFU, real peak HBM, compile) beside the planner's calibrated time and memory for the same layers, one
table for docs/BENCHMARKS.md, and every report as `plan --run --json` prints it.

    python bench/tpu_shapes.py --shape "recipes/gemma4-12b-tpu-v6e-4.yaml 6" \
        --shape "recipes/gemma4-e4b-tpu-v6e-4.yaml 6 model.size=e2b" --out shapes.json

A shape is "RECIPE LAYERS [--set lines ...]". The recipe's mesh is fitted to the attached chips (`hardware: auto`).
A shape that fails (out of memory, a refused mesh) is reported with its error and the others still run; the JSON
is written after each shape, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from crosstune.plan.driver import measured_plan


def _shape(text: str) -> tuple[Path, int, list[str]]:
    recipe, layers, *overrides = text.split()
    return Path(recipe), int(layers), overrides


def _f(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _row(name: str, r: dict) -> str:
    if "error" in r:
        return f"| {name} | {r['error']} | | | | | | | |"
    m, p = r["measured"], r["predicted"]
    return (
        f"| {name} | {m['micro_step_s']:.4f} | {_f(p['micro_step_s'], '.4f')} | "
        f"{_f(r['time_predicted_over_measured'], '.3f')} | {m['tokens_per_s']:,.0f} | {_f(m['mfu'], '.1%')} | "
        f"{_f(m['peak_gb'], '.2f')} | {p['planner_gb']:.2f} ({_f(r['memory_predicted_over_measured'], '.3f')}) | "
        f"{m['compile_s']:.0f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", required=True, help='"RECIPE LAYERS [SET ...]"')
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    reports: dict[str, dict] = {}
    for text in args.shape:
        recipe, layers, overrides = _shape(text)
        start = time.perf_counter()
        try:
            reports[text] = measured_plan(recipe, overrides, layers, args.steps, None, say=print)
        except Exception as e:  # noqa: BLE001 - a shape that can't run is a result: the others still run
            reports[text] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        reports[text]["wall_s"] = time.perf_counter() - start
        print(f"{text}: {time.perf_counter() - start:.0f} s", flush=True)
        if args.out is not None:
            args.out.write_text(json.dumps(reports, indent=1), encoding="utf-8")
    header = "shape | measured s | predicted s | predicted / measured | tok/s | MFU (4N) | peak GB | planner GB"
    print(f"| {header} (/ measured) | compile s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in reports.items():
        print(_row(name, r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
