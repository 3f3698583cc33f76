"""Verdicts: the strict rule (default) and VerilogEval v2's own rule (`upstream_compatible`).

Strict: pass only if the compile succeeds, vvp exits 0 and the *last* result line the testbench prints
with this run's secret token reports 0 mismatches in exactly the reference's N samples. A design cannot
print that line (it never sees the token), end the run early (N would differ), or stop it with
$finish/$fatal (rejected before running).

Upstream (scripts/sv-iv-analyze in NVlabs/verilog-eval): scan the combined compile+simulation log, first
matching line wins for S e 0 n w m c T; then p, C; pass if any line is exactly `Mismatches: 0 in N
samples`; else r when the design mentions posedge/negedge reset, else R. Fooled by the four known fake
passes; use it only to compare with published numbers.

RTLLM: strict passes when vvp exits 0, the testbench's pass display ran (its tokened twin printed) and none of
its failure displays did. Upstream (RTLLM's auto_run.py) passes any simulation whose output contains "Pass" or
"pass" — a design that prints the word passes.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

PASS = "."
CATEGORIES: dict[str, str] = {
    ".": "pass",
    "S": "syntax error",
    "e": "explicit cast required",
    "0": "sized numeric constant of zero width",
    "n": "process with no sensitivities (never triggers)",
    "w": "assignment to a wire (declared here as wire)",
    "m": "unknown module type",
    "c": "unable to bind clk",
    "p": "unable to bind a wire/reg/memory",
    "C": "other compile error",
    "T": "timeout: the sample's wall budget ran out, or the testbench's TIMEOUT cut the run short",
    "r": "mismatch, and the design uses posedge/negedge reset (likely an asynchronous reset)",
    "R": "output mismatch or runtime failure (vvp error, missing or short result)",
    # Codes beyond upstream's:
    "X": "rejected by the sandbox before running (file/process tasks, reaching outside the design, ...)",
    "L": "resource limit hit (CPU seconds, memory, file size or output size)",
    "B": "reference broken: the problem's own reference fails, so its samples cannot be judged",
    "U": "unfinished reasoning: the thinking never closed within the token budget, so there is no answer",
}

_UPSTREAM_MISMATCH = re.compile(r"^Mismatches: (\d+) in \d+ samples$")
_ASYNC_RESET_MARKS = ("posedge reset", "negedge reset", "posedge r)")


@dataclass(frozen=True)
class LogScan:
    """Upstream's reading of a log: its code ('?' when no rule decided) and the mismatch count seen."""

    code: str
    mismatches: int | None


def _lines(text: str) -> io.StringIO:
    """Iterate like Python reading the log file in text mode (universal newlines), as upstream does."""
    return io.StringIO(text, newline=None)


def scan_log(log: str) -> LogScan:
    """Upstream's line loop over a log, verbatim in its order and substrings."""
    code, error_c, error_p, no_mismatch, mismatches = "?", False, False, False, None
    for line in _lines(log):
        if "syntax error" in line:
            code = "S"
            break
        if "error" in line:
            error_c = True
        if "error: This assignment requires an explicit cast" in line:
            code = "e"
            break
        if "error: Sized numeric constant must have a size greater than zero" in line:
            code = "0"
            break
        if "warning: always_comb process has no sensitivities" in line:
            code = "n"
            break
        if "found no sensitivities so it will never trigger" in line:
            code = "n"
            break
        if "is declared here as wire" in line:
            code = "w"
            break
        if "Unknown module type" in line:
            code = "m"
            break
        if "Unable to bind wire/reg" in line:
            error_p = True
        if "Unable to bind wire/reg/memory `clk'" in line:
            code = "c"
            break
        if "TIMEOUT" in line:
            code = "T"
            break
        match = _UPSTREAM_MISMATCH.match(line)
        if match:
            if int(match.group(1)) == 0:
                no_mismatch = True
            else:
                mismatches = int(match.group(1))
    if code == "?" and error_p:
        code = "p"
    if code == "?" and error_c:
        code = "C"
    if code == "?" and no_mismatch:
        code = PASS
    return LogScan(code, mismatches)


def async_reset_code(design: str) -> str:
    """Upstream's runtime-failure split: r if a design line mentions posedge/negedge reset, else R."""
    return "r" if any(mark in line for line in _lines(design) for mark in _ASYNC_RESET_MARKS) else "R"


def upstream_verdict(log: str, design: str) -> LogScan:
    """VerilogEval v2's verdict for one sample from its combined compile+simulation log."""
    scan = scan_log(log)
    if scan.code == "?":
        return LogScan(async_reset_code(design), scan.mismatches)
    return scan


def compile_failure_code(log: str) -> str:
    """Category of a failed compile, by upstream's line rules; C when none of them matches."""
    code = scan_log(log).code
    return code if code not in ("?", PASS, "T") else "C"


def result_lines(output: str, token: str) -> list[tuple[int, int]]:
    """(mismatches, samples) from every line the instrumented testbench printed with `token`."""
    pattern = re.compile(rf"^{re.escape(token)} (\d+) (\d+)$")
    return [(int(m.group(1)), int(m.group(2))) for line in _lines(output) if (m := pattern.match(line))]


def strip_token_lines(output: str, token: str) -> str:
    """The simulation output as upstream would see it (the tokened result line is ours, not upstream's)."""
    return "".join(line for line in _lines(output) if not line.startswith(token))


@dataclass(frozen=True)
class Strict:
    code: str
    detail: str
    mismatches: int | None = None
    samples: int | None = None


def strict_simulation_verdict(
    returncode: int | None, output: str, token: str, expected_samples: int | None, design: str
) -> Strict:
    """Strict verdict of a run that compiled and ran to completion (limits are judged by the caller).

    `expected_samples` is the reference's N; None judges the reference itself (N = its own count > 0).
    """
    results = result_lines(output, token)
    if returncode != 0:
        return Strict("R", f"vvp exited with status {returncode}")
    if not results:
        return Strict("R", "the testbench printed no result (the simulation did not reach its end)")
    mismatches, samples = results[-1]
    expected = samples if expected_samples is None else expected_samples
    if samples != expected or samples == 0:
        code = "T" if any(line.strip() == "TIMEOUT" for line in _lines(output)) else "R"
        return Strict(code, f"{samples} samples simulated, the reference has {expected}", mismatches, samples)
    if mismatches:
        return Strict(async_reset_code(design), f"{mismatches} mismatches in {samples} samples", mismatches, samples)
    return Strict(PASS, f"0 mismatches in {samples} samples", 0, samples)


def rtllm_strict_verdict(returncode: int | None, output: str, token: str) -> Strict:
    """RTLLM's strict verdict of a run that compiled and ran to completion (limits are judged by the caller)."""
    lines = [line.rstrip("\n") for line in _lines(output)]
    passes, failures = lines.count(f"{token} pass"), lines.count(f"{token} fail")
    if returncode != 0:
        return Strict("R", f"vvp exited with status {returncode}")
    if failures:
        return Strict("R", f"the testbench printed {failures} failure line(s)")
    if not passes:
        return Strict("R", "the testbench never printed its pass line (the simulation did not reach its verdict)")
    return Strict(PASS, "the testbench printed its pass line and no failure line")


def rtllm_upstream_verdict(output: str) -> str:
    """RTLLM auto_run.py's rule on a run that compiled and finished in time: pass if "Pass" or "pass" appears."""
    return PASS if "Pass" in output or "pass" in output else "R"
