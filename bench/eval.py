"""Evaluation throughput: all references of a problem set, serial vs parallel (sandbox on), and the
sandbox's per-sample overhead against bare `iverilog` + `vvp`, all measured in the same run.

    .venv/bin/python bench/eval.py                      # 156 synthetic problems (crosstune.synth)
    .venv/bin/python bench/eval.py --problems DIR       # any VerilogEval v2 layout folder

Overhead is measured per sample, bare and sandboxed back to back, in wall time and in CPU time (CPU time is
what a noisy shared machine disturbs least). Serial and parallel runs alternate; each figure is the best of
--repeat runs.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from crosstune.evals.evaluate import measure_references
from crosstune.evals.judge.sandbox import Limits
from crosstune.evals.judge.simulate import COMPILE_FLAGS, judge_design, reference_as_design
from crosstune.evals.problems.problem_sets import Problem, load_problems


def cpu_seconds() -> float:
    """CPU time of this process and its reaped children so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def bare_run(problem: Problem) -> tuple[float, float]:
    """Upstream's two commands without any sandbox layer: (wall, CPU) seconds."""
    with tempfile.TemporaryDirectory(prefix="bench-bare-") as tmp:
        work = Path(tmp)
        (work / "sample.sv").write_text(reference_as_design(problem))
        (work / "test.sv").write_text(problem.test)
        (work / "ref.sv").write_text(problem.ref)
        wall, cpu = time.monotonic(), cpu_seconds()
        argv = ["iverilog", *COMPILE_FLAGS, "-s", "tb", "-o", "sim", "sample.sv", "test.sv", "ref.sv"]
        subprocess.run(argv, cwd=work, capture_output=True, check=True)
        result = subprocess.run(["vvp", "-n", "sim"], cwd=work, capture_output=True, text=True, check=True)
        wall, cpu = time.monotonic() - wall, cpu_seconds() - cpu
    assert "Mismatches: 0 in" in result.stdout, f"{problem.name}: reference fails even bare"
    return wall, cpu


def sandboxed_run(problem: Problem) -> tuple[float, float]:
    """The full sandboxed judgement of the reference, in this (single-threaded) process: (wall, CPU)."""
    wall, cpu = time.monotonic(), cpu_seconds()
    outcome = judge_design(reference_as_design(problem), problem, None, Limits())
    wall, cpu = time.monotonic() - wall, cpu_seconds() - cpu
    assert outcome.strict == ".", f"{problem.name}: {outcome.detail}"
    return wall, cpu


def pool_wall(problems: list[Problem], workers: int) -> float:
    """Wall time of judging every reference on a pool of `workers` processes (pool start included)."""
    start = time.monotonic()
    outcomes = measure_references(problems, Limits(), workers)  # no counts file: every reference runs
    elapsed = time.monotonic() - start
    failed = [name for name, o in outcomes.items() if o.strict != "."]
    assert not failed, f"references failing in the sandbox: {failed}"
    return elapsed


def ms(seconds: float) -> str:
    return f"{1000 * seconds:6.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=Path, help="problem folder (default: generate a synthetic set)")
    parser.add_argument("--n-synthetic", type=int, default=156, help="problems in the generated set")
    parser.add_argument("--workers", type=int, default=2, help="parallel workers for the parallel run")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs of each measurement")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        if args.problems:
            problems = load_problems(args.problems)
            source = str(args.problems)
        else:
            from crosstune.synth import generate_corpus

            corpus = generate_corpus(Path(tmp) / "synth", 0, args.n_synthetic, seed=0)
            problems = load_problems(corpus.eval_dir)
            source = f"synthetic (crosstune.synth, {args.n_synthetic} problems, seed 0)"
        print(f"problem set: {source}: {len(problems)} references; best of {args.repeat} runs each")

        bare, boxed = [], []
        for problem in problems:  # back to back per sample, so load bursts hit both alike
            bare.append(min((bare_run(problem) for _ in range(args.repeat)), key=lambda r: r[0]))
            boxed.append(min((sandboxed_run(problem) for _ in range(args.repeat)), key=lambda r: r[0]))
        serial, parallel = [], []
        for _ in range(args.repeat):
            serial.append(pool_wall(problems, workers=1))
            parallel.append(pool_wall(problems, workers=args.workers))

    for label, index in (("wall", 0), ("CPU", 1)):
        bare_mean, boxed_mean = statistics.mean(r[index] for r in bare), statistics.mean(r[index] for r in boxed)
        extra = [b[index] - a[index] for a, b in zip(bare, boxed, strict=True)]
        print(
            f"per sample {label:4}: bare {ms(bare_mean)}, sandboxed {ms(boxed_mean)}, overhead mean "
            f"{ms(statistics.mean(extra))}, median {ms(statistics.median(extra))}"
        )
    print(f"all references, sandboxed, 1 worker : {min(serial):6.2f} s")
    print(f"all references, sandboxed, {args.workers} workers: {min(parallel):6.2f} s")
    print(f"speedup parallel vs serial          : {min(serial) / min(parallel):6.2f} x")


if __name__ == "__main__":
    main()
