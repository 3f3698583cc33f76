"""Test helper: compile and run a VerilogEval-style testbench with Icarus Verilog, parse the Mismatches line."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

IVERILOG_FLAGS = ["-Wall", "-Winfloop", "-Wno-timescale", "-g2012", "-s", "tb"]
MISMATCH_LINE = re.compile(r"^Mismatches: (\d+) in (\d+) samples$", re.MULTILINE)
HAVE_IVERILOG = shutil.which("iverilog") is not None and shutil.which("vvp") is not None


@dataclass(frozen=True)
class SimResult:
    compile_log: str  # iverilog stdout+stderr; empty when the sources compile without warnings
    compiled: bool
    sim_log: str
    mismatches: int | None  # from the last "Mismatches: M in N samples" line; None when there is none
    samples: int | None

    @property
    def passed(self) -> bool:
        return self.compiled and self.mismatches == 0 and (self.samples or 0) > 0


def simulate(sources: dict[str, str], timeout_s: float = 30.0) -> SimResult:
    """Write `sources` (file name -> text) to a temp dir, compile them in order with -s tb, run vvp."""
    with tempfile.TemporaryDirectory(prefix="synth-sim-") as tmp:
        work = Path(tmp)
        for name, text in sources.items():
            (work / name).write_text(text)
        build = subprocess.run(
            ["iverilog", *IVERILOG_FLAGS, "-o", "sim", *sources],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        compile_log = (build.stdout + build.stderr).strip()
        if build.returncode != 0:
            return SimResult(compile_log, False, "", None, None)
        run = subprocess.run(["vvp", "-n", "sim"], cwd=work, capture_output=True, text=True, timeout=timeout_s)
        log = run.stdout + run.stderr
        found = MISMATCH_LINE.findall(log)
        if not found:
            return SimResult(compile_log, True, log, None, None)
        mismatches, samples = found[-1]
        return SimResult(compile_log, True, log, int(mismatches), int(samples))
