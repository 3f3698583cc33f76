"""The root cause of a server that failed to start, found in its log.

vLLM's log of a failed start runs to hundreds of lines, and its last lines only say that something failed earlier
("Engine core initialization failed. See root cause above."). The cause is the last line of the first traceback
(the exception it ended with). vLLM prefixes every line of a log record, traceback lines included, with the same
"(EngineCore pid=…) ERROR date [file:line] " text, so a traceback's lines are recognised after that prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b|^[A-Za-z_][\w.]*: ")
_ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL|FATAL)\b")


@dataclass(frozen=True)
class RootCause:
    line: int  # 1-based line number in the log
    text: str


def root_cause(lines: list[str]) -> RootCause | None:
    """The last line of the first traceback; without a traceback, the first ERROR line; None if neither."""
    for i, line in enumerate(lines):
        at = line.find(TRACEBACK)
        if at < 0:
            continue
        prefix = line[:at]
        for j in range(i + 1, len(lines)):
            if not lines[j].startswith(prefix):
                continue  # another process's line, interleaved
            body = lines[j][len(prefix) :]
            if body.strip() and not body.startswith((" ", "\t")) and _EXCEPTION.match(body):
                return RootCause(j + 1, body.strip() + _continuation(lines, j + 1, prefix))
            # frames and their source lines are indented; the exception is the first line that is not
        break
    for i, line in enumerate(lines):
        if _ERROR_LINE.search(line):
            return RootCause(i + 1, line.strip())
    return None


def _continuation(lines: list[str], i: int, prefix: str) -> str:
    """The indented line that continues a multi-line exception message (pydantic's ValidationError says what
    failed there: "  Value error, User-specified max_model_len …"), or ""."""
    if i >= len(lines) or not lines[i].startswith(prefix):
        return ""
    body = lines[i][len(prefix) :]
    if not body.strip() or not body.startswith((" ", "\t")) or body.lstrip().startswith("File "):
        return ""
    return " — " + body.strip()[:400]


def explain_failure(log: Path, offset: int = 0, tail: int = 5) -> str:
    """For an error message: the root cause with its line number, and where the whole log is. Only what follows
    byte `offset` is searched (the log is appended to by every start; earlier starts' errors are not this one's)."""
    try:
        data = Path(log).read_bytes()
    except OSError:
        return f"(no log at {log})"
    before = data[:offset].count(b"\n")
    lines = data[offset:].decode(errors="replace").splitlines()
    total = before + len(lines)
    cause = root_cause(lines)
    if cause is not None:
        return f"root cause (line {before + cause.line} of {total} in {log}): {cause.text}"
    last = "\n".join(lines[-tail:]) if lines else "(empty)"
    return f"no error in the log; its last lines ({log}, {total} lines):\n{last}"
