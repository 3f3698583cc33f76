"""Static screening of an untrusted design, on its *preprocessed* text (macros expanded, `ifdefs resolved).

A design may call only allow-listed system functions: pure ones (math, conversions, $bits, $clog2...),
simulation time, and console output. Console output cannot forge a verdict: the strict verdict reads a
result line carrying a per-run random token the design never sees. Everything else is rejected: file
tasks ($fopen family, $readmem*/$writemem*, $dump*), process control ($finish/$stop/$fatal/$exit,
$system), randomness shared with the stimulus generator ($random/$urandom), plusargs, timing checks, PLI
calls nobody can classify, and $root/$unit. So are backtick directives surviving preprocessing
(they would be expanded again when compiling), force/release, bind, DPI imports, modules that shadow
the testbench's, and dotted names rooted at the testbench's instances. Upward references the lexer
cannot see are caught by elaborating the design alone (simulate.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from crosstune.evals.problems.benchmark import VERILOGEVAL_TESTBENCH_INSTANCES, VERILOGEVAL_TESTBENCH_MODULES
from crosstune.evals.problems.verilog_source import blank_comments_and_strings

ALLOWED_SYSTEM_NAMES = frozenset(
    {
        # pure functions: conversions, sizes, bit counting, math
        *"$signed $unsigned $cast $clog2 $bits $size $left $right $low $high $increment $dimensions".split(),
        *"$unpacked_dimensions $countones $countbits $onehot $onehot0 $isunknown".split(),
        *"$itor $rtoi $realtobits $bitstoreal $shortrealtobits $bitstoshortreal".split(),
        *"$ln $log10 $exp $sqrt $pow $floor $ceil $hypot".split(),
        *"$sin $cos $tan $asin $acos $atan $atan2 $sinh $cosh $tanh $asinh $acosh $atanh".split(),
        # simulation time (read only)
        *"$time $stime $realtime".split(),
        # console output and in-memory formatting (cannot forge the tokened verdict; floods are capped)
        *"$display $displayb $displayh $displayo $write $writeb $writeh $writeo".split(),
        *"$strobe $strobeb $strobeh $strobeo $monitor $monitorb $monitorh $monitoro".split(),
        *"$monitoron $monitoroff $info $warning $error $sformat $sformatf".split(),
    }
)
REJECTED_KEYWORDS = {"force": "force", "release": "release", "bind": "bind"}

_TOKEN = re.compile(r"\\(\S+)|([A-Za-z_][A-Za-z0-9_$]*)|(\$[A-Za-z0-9_$]*)")
_DPI = re.compile(r'\b(?:import|export)\s*"')
_DEFINITION = re.compile(r"\b(?:module|macromodule|program|interface|primitive|package|class)\s+\\?(\w+)")
_INCLUDE = re.compile(r"`\s*include\b")
# Any hierarchical name has this shape (name, optional [index]es, dot, name); port connections `.a(x)` do not.
_DOTTED_NAME = re.compile(r"(?:[A-Za-z_][\w$]*|\\\S+)\s*(?:\[[^\]]*\]\s*)*\.\s*[A-Za-z_\\$]")
_DIRECTIVE = re.compile(r"`\s*(\w*)")
# Directives left after preprocessing that the compile step may see; any other backtick (a macro built by
# token pasting, an `include the preprocessor did not expand) would be expanded a second time there.
ALLOWED_DIRECTIVES = frozenset("timescale default_nettype celldefine endcelldefine resetall".split())


@dataclass(frozen=True)
class Rejection:
    """Why a design is not run; `line` is 1-based in the extracted design."""

    reason: str
    line: int


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def find_include(raw: str) -> Rejection | None:
    """`include reads any file into the design; checked on the raw text, before the preprocessor runs."""
    match = _INCLUDE.search(blank_comments_and_strings(raw))
    if match:
        return Rejection("`include is not allowed (it reads files outside the design)", _line(raw, match.start()))
    return None


def has_dotted_name(preprocessed: str) -> bool:
    """Whether the design may use a hierarchical name (then simulate.py elaborates it alone to check)."""
    return _DOTTED_NAME.search(blank_comments_and_strings(preprocessed)) is not None


@cache
def _into_testbench(instances: tuple[str, ...]) -> re.Pattern[str]:
    names = "|".join(map(re.escape, instances))
    return re.compile(r"(?<![\w$.\\])\\?(" + names + r")\s*(?:\[[^\]]*\]\s*)*\.\s*\w")


def screen_design(
    preprocessed: str,
    testbench_modules: tuple[str, ...] = VERILOGEVAL_TESTBENCH_MODULES,
    testbench_instances: tuple[str, ...] = VERILOGEVAL_TESTBENCH_INSTANCES,
) -> Rejection | None:
    """The first construct that makes the design unsafe to run, or None. `testbench_modules` are the names the
    design may not define, `testbench_instances` those a dotted name may not start with (VerilogEval's defaults)."""
    text = blank_comments_and_strings(preprocessed)
    for match in _DIRECTIVE.finditer(text):
        if match.group(1) not in ALLOWED_DIRECTIVES:
            reason = f"compiler directive `{match.group(1)} is not allowed after preprocessing"
            return Rejection(reason, _line(text, match.start()))
    for match in _TOKEN.finditer(text):
        escaped, identifier, system = match.groups()
        if escaped is not None and escaped.startswith("$"):
            system = escaped  # iverilog treats `\$finish ` as the system task $finish
        line = _line(text, match.start())
        if system is not None and system != "$" and system not in ALLOWED_SYSTEM_NAMES:
            return Rejection(f"system task/function {system} is not allowed in a design", line)
        if identifier in REJECTED_KEYWORDS:
            return Rejection(f"`{identifier}` is not allowed in a design (it can reach other scopes)", line)
    checks = (
        (_DPI, "DPI import/export is not allowed"),
        (_into_testbench(testbench_instances), "hierarchical reference into the testbench is not allowed"),
    )
    for pattern, reason in checks:
        match = pattern.search(text)
        if match:
            return Rejection(reason, _line(text, match.start()))
    for match in _DEFINITION.finditer(text):
        if match.group(1) in testbench_modules:
            return Rejection(
                f"a design may not define {match.group(1)} (the testbench's name)", _line(text, match.start())
            )
    return None
