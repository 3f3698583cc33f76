"""`crosstune plan --run` over several recipes' shapes on an attached TPU, one process per shape: each shape's measured
step (time, tok/s, MFU, real peak HBM, compile) beside the planner's calibrated time and memory for the same layers,
one table for docs/BENCHMARKS.md, and every report as `plan --run --json` prints it.

    python bench/tpu_shapes.py --shape "recipes/gemma4-12b-tpu-v6e-4.yaml 6" \
        --shape "recipes/gemma4-e4b-tpu-v6e-4.yaml 6 model.size=e2b" --out shapes.json

A shape is "RECIPE LAYERS [--set lines ...]", split as a shell splits words (quote a --set line that holds spaces).
The recipe's mesh is fitted to the attached chips (`hardware: auto`).
A shape that fails (out of memory, a refused mesh) is reported with its error and the others still run; the JSON
is written after each shape, so a run cut short keeps what it measured. Each shape runs in a process of its own: a
device's peak memory counts from the process's start (memory_stats has no reset), so shapes run one after another
in one process would each report the largest peak so far.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

CLI = "from crosstune.cli import main; import sys; sys.argv[0] = 'crosstune'; main()"


def measure(text: str, steps: int) -> dict:
    """`crosstune plan RECIPE --run --layers LAYERS --json` for the shape "RECIPE LAYERS [SET ...]", in a child
    process whose progress lines pass through; its report, or {"error": its last line}."""
    recipe, layers, *overrides = shlex.split(text)
    cmd = [sys.executable, "-c", CLI, "plan", recipe, "--run", "--layers", layers, "--steps", str(steps), "--json"]
    cmd += [a for o in overrides for a in ("--set", o)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        return {"error": f"exit {done.returncode} (its last lines are above)"}
    return json.loads(done.stdout)


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
        start = time.perf_counter()
        reports[text] = measure(text, args.steps)
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
