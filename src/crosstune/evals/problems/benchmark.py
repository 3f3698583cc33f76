"""What every benchmark's problem looks like to the evaluator: Problem, the task names, selection by name.

VerilogEval v2 (problem_sets.py) and RTLLM (rtllm.py) read their own layouts into the same Problem; everything
downstream (prompts, extraction, the sandboxed judge, scoring) reads only this.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from crosstune.confinement import inside
from crosstune.errors import CrosstuneError

SPEC_TO_RTL = "spec-to-rtl"
CODE_COMPLETE = "code-complete-iccad2023"
RTLLM = "rtllm"
VERILOGEVAL_TASKS = (SPEC_TO_RTL, CODE_COMPLETE)

# VerilogEval v2's testbench: the modules it defines and the instance names a design must not reach into.
VERILOGEVAL_TESTBENCH_MODULES = ("tb", "stimulus_gen", "RefModule")
VERILOGEVAL_TESTBENCH_INSTANCES = ("tb", "stim1", "good1", "top_module1")


class ProblemSetError(CrosstuneError, ValueError):
    """A problem set is missing, malformed, or a selection matched nothing."""


@dataclass(frozen=True)
class Problem:
    """One problem: its prompt, reference, testbench and (code-complete only) interface, and how to judge a design.

    VerilogEval compiles the design with the testbench *and* the reference (module `RefModule`); RTLLM compiles
    the design with the testbench alone (the reference is only judged in the self-check). Either way the
    reference becomes a design by renaming its module `ref_top` to `top`.
    """

    name: str  # e.g. "Prob001_zero", "adder_8bit"
    task: str  # SPEC_TO_RTL, CODE_COMPLETE or RTLLM
    prompt: str
    ref: str
    test: str
    ifc: str | None
    folder: Path
    top: str = "TopModule"  # the module the design must define (the testbench instantiates it)
    ref_top: str = "RefModule"
    testbench_top: str = "tb"  # the simulation's root module (`iverilog -s`)
    testbench_modules: tuple[str, ...] = VERILOGEVAL_TESTBENCH_MODULES  # a design may not define these
    testbench_instances: tuple[str, ...] = VERILOGEVAL_TESTBENCH_INSTANCES  # nor use dotted names rooted here
    data_files: tuple[tuple[str, bytes], ...] = ()  # files the testbench reads ($readmemh/$fopen), copied beside it

    @property
    def suite(self) -> str:
        """ "rtllm" or "verilogeval": which testbench convention judges this problem."""
        return "rtllm" if self.task == RTLLM else "verilogeval"

    @property
    def testbench_path(self) -> Path:
        return self.folder / ("testbench.v" if self.task == RTLLM else f"{self.name}_test.sv")


def problem_file(root: Path, path: Path) -> Path:
    """`path` resolved, when it stays inside the problem set `root` the user named: a link out of it is refused by
    name (crosstune.confinement), so no file outside reaches a prompt, an endpoint or the simulator."""
    fix = "copy the file itself into the problem set, or remove the link"
    # absolute: a relative `path` is taken as relative to the root (`--problems problems` read problems/problems/...)
    return inside(root, Path(path).absolute(), label="--problems", fix=fix, error=ProblemSetError)


def select(problems: list[Problem], patterns: list[str] | None) -> list[Problem]:
    """Problems whose name matches any of `patterns` (exact names or fnmatch globs, comma lists allowed)."""
    if not patterns:
        return problems
    wanted = [p.strip() for pattern in patterns for p in pattern.split(",") if p.strip()]
    chosen = [p for p in problems if any(fnmatch.fnmatchcase(p.name, w) for w in wanted)]
    unmatched = [w for w in wanted if not any(fnmatch.fnmatchcase(p.name, w) for p in problems)]
    if unmatched:
        raise ProblemSetError(f"no problem matches {', '.join(map(repr, unmatched))}")
    return chosen
