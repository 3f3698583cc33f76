"""Judge one design against one problem: preprocess, screen, compile, elaborate alone, simulate, verdict.

Every step runs through sandbox.run_limited in the sample's own temporary directory, removed afterwards,
and all steps share one wall budget (`Limits.timeout_s`). Both verdicts are computed from the same run:
`strict` (ours) and `upstream` (VerilogEval v2's rule); the caller chooses which one counts.
"""

from __future__ import annotations

import re
import secrets
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from crosstune.evals.problems import ProblemSetError
from crosstune.evals.sandbox import Limits, RunResult, run_limited
from crosstune.evals.screen import Rejection, find_include, has_dotted_name, screen_design
from crosstune.evals.verdict import (
    compile_failure_code,
    strict_simulation_verdict,
    strip_token_lines,
    upstream_verdict,
)

COMPILE_FLAGS = ["-Wall", "-Winfloop", "-Wno-timescale", "-g2012"]
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


def reference_as_design(ref: str) -> str:
    """The reference renamed to TopModule, to measure its own sample count N like any design."""
    return re.sub(r"\bRefModule\b", "TopModule", ref)


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
    test: str,
    ref: str,
    expected_samples: int | None,
    limits: Limits,
    workroot: str | None = None,
) -> Outcome:
    """Verdicts for `design` on the problem (`test`, `ref`); `expected_samples` is the reference's N
    (None when `design` is the reference itself). Runs in the caller's process: call from a worker."""
    start = time.monotonic()

    def remaining() -> float:
        return limits.timeout_s - (time.monotonic() - start)

    rejection = find_include(design)
    if rejection:
        return _rejected(rejection, start)
    with tempfile.TemporaryDirectory(prefix="crosstune-sample-", dir=workroot) as tmp:
        work = Path(tmp)
        (work / "raw.sv").write_text(design)
        pre = run_limited(["iverilog", "-g2012", "-E", "-M", "deps.txt", "-o", "sample.sv", "raw.sv"], work,
                          limits, remaining())  # fmt: skip
        if pre.limit:
            return _limit_outcome("preprocess", pre, start)
        if _deps_outside(work):
            return _rejected(Rejection("the preprocessor read a file outside the design", 0), start, pre.landlocked)
        if pre.returncode != 0:
            code = compile_failure_code(pre.output)
            log = pre.output[:LOG_CHARS]
            return Outcome(code, code, "preprocessing failed", wall_s=time.monotonic() - start, log=log,
                           landlocked=pre.landlocked)  # fmt: skip
        preprocessed = (work / "sample.sv").read_text(errors="replace")
        rejection = screen_design(preprocessed)
        if rejection:
            return _rejected(rejection, start, pre.landlocked)
        token = secrets.token_hex(16)
        (work / "test.sv").write_text(instrument_testbench(test, token))
        (work / "ref.sv").write_text(ref)
        argv = ["iverilog", *COMPILE_FLAGS, "-s", "tb", "-o", "sim", "sample.sv", "test.sv", "ref.sv"]
        compiled = run_limited(argv, work, limits, remaining())
        if compiled.limit:
            return _limit_outcome("compile", compiled, start)
        if compiled.returncode != 0:
            code = compile_failure_code(compiled.output)
            upstream = upstream_verdict(compiled.output, design).code
            return Outcome(code, upstream, f"compile failed ({code})", wall_s=time.monotonic() - start,
                           log=compiled.output[:LOG_CHARS], landlocked=compiled.landlocked)  # fmt: skip
        if has_dotted_name(preprocessed):  # a name may point outside: it must elaborate without the testbench
            alone = run_limited(["iverilog", "-g2012", "-s", "TopModule", "-o", "alone", "sample.sv"], work, limits,
                                remaining())  # fmt: skip
            if alone.limit:
                return _limit_outcome("standalone elaboration", alone, start)
            if alone.returncode != 0:
                reason = "the design uses names outside itself (it does not elaborate without the testbench)"
                return _rejected(Rejection(reason, 0), start, alone.landlocked)
        sim = run_limited(["vvp", "-n", "sim"], work, limits, remaining())
        if sim.limit:
            return _limit_outcome("simulation", sim, start)
    strict = strict_simulation_verdict(sim.returncode, sim.output, token, expected_samples, design)
    log = compiled.output + strip_token_lines(sim.output, token)
    return Outcome(
        strict=strict.code,
        upstream=upstream_verdict(log, design).code,
        detail=strict.detail,
        mismatches=strict.mismatches,
        samples=strict.samples,
        wall_s=time.monotonic() - start,
        log=log[:LOG_CHARS],
        landlocked=sim.landlocked,
    )
