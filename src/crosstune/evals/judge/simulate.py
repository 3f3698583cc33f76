"""Judge one design against one problem: preprocess, screen, compile, elaborate alone, simulate, verdict.

Every step runs through sandbox.run_limited in the sample's own temporary directory, removed afterwards,
and all steps share one wall budget (`Limits.timeout_s`). Both verdicts are computed from the same run:
`strict` (ours) and `upstream` (the benchmark's own rule: VerilogEval v2's or RTLLM's); the caller chooses
which one counts. The two benchmarks differ only in what is compiled with the design and how the testbench
reports: VerilogEval compiles design + testbench + reference (`-s tb`) with upstream's flags; RTLLM compiles
a `timescale 1ns/1ns` line (VCS's `-timescale=1ns/1ns`, what upstream runs), the design and the testbench
(`-s` its root), in the makefile's order, with the testbench's data files beside them.
"""

from __future__ import annotations

import re
import secrets
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from crosstune.evals.judge.sandbox import Limits, RunResult, run_limited
from crosstune.evals.judge.screen import Rejection, find_include, has_dotted_name, screen_design
from crosstune.evals.judge.verdict import (
    Strict,
    compile_failure_code,
    rtllm_strict_verdict,
    rtllm_upstream_verdict,
    strict_simulation_verdict,
    strip_token_lines,
    upstream_verdict,
)
from crosstune.evals.problems import rtllm
from crosstune.evals.problems.benchmark import Problem, ProblemSetError

COMPILE_FLAGS = ["-Wall", "-Winfloop", "-Wno-timescale", "-g2012"]
RTLLM_COMPILE_FLAGS = ["-g2012"]
RTLLM_TIMESCALE = "`timescale 1ns/1ns\n"
LOG_CHARS = 4000  # per-sample log kept in reports: enough to read a compile error

_RESULT_DISPLAY = re.compile(r'\$display\s*\(\s*"Mismatches: %[0-9]*d in %[0-9]*d samples"\s*,(?P<args>[^;]*?)\)\s*;')


@dataclass(frozen=True)
class Outcome:
    """A sample's verdicts. `strict`/`upstream` are category codes (verdict.CATEGORIES)."""

    strict: str
    upstream: str
    detail: str
    mismatches: int | None = None
    samples: int | None = None
    wall_s: float = 0.0
    log: str = ""
    landlocked: bool = False
    limit: str | None = None  # the resource bound that stopped the run (sandbox.RunResult.limit), if one did

    def to_dict(self) -> dict:
        return asdict(self)


def instrument_testbench(test: str, token: str, where: str = "testbench") -> str:
    """Add a second result line carrying `token` next to the testbench's `Mismatches:` display.

    The original line stays, so the upstream verdict reads the log it always read.
    """
    found = list(_RESULT_DISPLAY.finditer(test))
    if len(found) != 1:
        raise ProblemSetError(
            f'{where}: expected exactly one `$display("Mismatches: %1d in %1d samples", ...)`, found '
            f"{len(found)}; the evaluator reads the result from that line"
        )
    match = found[0]
    tokened = f'$display("{token} %0d %0d",{match.group("args")});'
    return f"{test[: match.start()]}begin {match.group(0)} {tokened} end{test[match.end() :]}"


def instrument(problem: Problem, token: str) -> str:
    """The problem's testbench with the tokened result lines the strict verdict reads (ProblemSetError: none)."""
    where = str(problem.testbench_path)
    if problem.suite == "rtllm":
        return rtllm.instrument_testbench(problem.test, token, where)
    return instrument_testbench(problem.test, token, where)


def reference_as_design(problem: Problem) -> str:
    """The reference with its module renamed to the design's name, to judge it like any design (VerilogEval:
    RefModule -> TopModule, which also measures its own sample count N; RTLLM: verified_<name> -> <name>)."""
    if problem.ref_top == problem.top:
        return problem.ref
    return re.sub(rf"(?<![\w$]){re.escape(problem.ref_top)}(?![\w$])", problem.top, problem.ref)


def _compile_inputs(work: Path, problem: Problem, token: str) -> list[str]:
    """Write what is compiled with the design (and the testbench's data files); the compile command."""
    (work / "test.sv").write_text(instrument(problem, token))
    if problem.suite == "rtllm":
        (work / "timescale.v").write_text(RTLLM_TIMESCALE)
        for name, data in problem.data_files:
            (work / name).write_bytes(data)
        files = ["timescale.v", "sample.sv", "test.sv"]
        return ["iverilog", *RTLLM_COMPILE_FLAGS, "-s", problem.testbench_top, "-o", "sim", *files]
    (work / "ref.sv").write_text(problem.ref)
    return ["iverilog", *COMPILE_FLAGS, "-s", "tb", "-o", "sim", "sample.sv", "test.sv", "ref.sv"]


def _limit_outcome(step: str, run: RunResult, start: float) -> Outcome:
    code = "T" if run.limit == "timeout" else "L"
    detail = f"{step}: {'wall time budget exhausted' if code == 'T' else f'{run.limit} limit exceeded'}"
    return Outcome(code, code, detail, wall_s=time.monotonic() - start, landlocked=run.landlocked, limit=run.limit)


def _rejected(rejection: Rejection, start: float, landlocked: bool = False) -> Outcome:
    detail = f"rejected: {rejection.reason} (design line {rejection.line})"
    return Outcome("X", "X", detail, wall_s=time.monotonic() - start, landlocked=landlocked)


def _deps_outside(workdir: Path) -> list[str]:
    deps = workdir / "deps.txt"
    names = deps.read_text(errors="replace").split() if deps.exists() else []
    return [name for name in names if name != "raw.sv"]


def judge_design(
    design: str,
    problem: Problem,
    expected_samples: int | None,
    limits: Limits,
    workroot: str | None = None,
) -> Outcome:
    """Verdicts for `design` on `problem`; `expected_samples` is the VerilogEval reference's N (None when
    `design` is the reference itself, and for RTLLM). Runs in the caller's process: call from a worker."""
    start = time.monotonic()

    def remaining() -> float:
        return limits.timeout_s - (time.monotonic() - start)

    rejection = find_include(design)
    if rejection:
        return _rejected(rejection, start)
    with tempfile.TemporaryDirectory(prefix="crosstune-sample-", dir=workroot) as tmp:
        work = Path(tmp)
        (work / "raw.sv").write_text(design)
        pre = run_limited(
            ["iverilog", "-g2012", "-E", "-M", "deps.txt", "-o", "sample.sv", "raw.sv"], work, limits, remaining()
        )
        if pre.limit:
            return _limit_outcome("preprocess", pre, start)
        if _deps_outside(work):
            return _rejected(Rejection("the preprocessor read a file outside the design", 0), start, pre.landlocked)
        if pre.returncode != 0:
            code = compile_failure_code(pre.output)
            log = pre.output[:LOG_CHARS]
            return Outcome(
                code, code, "preprocessing failed", wall_s=time.monotonic() - start, log=log, landlocked=pre.landlocked
            )
        preprocessed = (work / "sample.sv").read_text(errors="replace")
        rejection = screen_design(preprocessed, problem.testbench_modules, problem.testbench_instances)
        if rejection:
            return _rejected(rejection, start, pre.landlocked)
        token = secrets.token_hex(16)
        compiled = run_limited(_compile_inputs(work, problem, token), work, limits, remaining())
        if compiled.limit:
            return _limit_outcome("compile", compiled, start)
        if compiled.returncode != 0:
            code = compile_failure_code(compiled.output)
            upstream = upstream_verdict(compiled.output, design).code if problem.suite == "verilogeval" else code
            return Outcome(
                code,
                upstream,
                f"compile failed ({code})",
                wall_s=time.monotonic() - start,
                log=compiled.output[:LOG_CHARS],
                landlocked=compiled.landlocked,
            )
        if has_dotted_name(preprocessed):  # a name may point outside: it must elaborate without the testbench
            alone = run_limited(
                ["iverilog", "-g2012", "-s", problem.top, "-o", "alone", "sample.sv"], work, limits, remaining()
            )
            if alone.limit:
                return _limit_outcome("standalone elaboration", alone, start)
            if alone.returncode != 0:
                reason = "the design uses names outside itself (it does not elaborate without the testbench)"
                return _rejected(Rejection(reason, 0), start, alone.landlocked)
        sim = run_limited(["vvp", "-n", "sim"], work, limits, remaining())
        if sim.limit:
            return _limit_outcome("simulation", sim, start)
    return _simulated(design, problem, expected_samples, compiled, sim, token, start)


def _simulated(design: str, problem: Problem, expected_samples: int | None, compiled, sim, token: str, start: float):
    """The outcome of a simulation that ran: the strict verdict (read from the lines marked with the run's token,
    which only the testbench prints) and the upstream one (VerilogEval's, or RTLLM's, on the text as printed)."""
    log = compiled.output + strip_token_lines(sim.output, token)
    strict: Strict
    if problem.suite == "rtllm":
        strict = rtllm_strict_verdict(sim.returncode, sim.output, token)
        upstream = rtllm_upstream_verdict(strip_token_lines(sim.output, token))
    else:
        strict = strict_simulation_verdict(sim.returncode, sim.output, token, expected_samples, design)
        upstream = upstream_verdict(log, design).code
    return Outcome(
        strict=strict.code,
        upstream=upstream,
        detail=strict.detail,
        mismatches=strict.mismatches,
        samples=strict.samples,
        wall_s=time.monotonic() - start,
        log=log[:LOG_CHARS],
        landlocked=sim.landlocked,
    )
