"""What a vLLM log says: the root cause of a server that failed to start, and the KV cache it allocated.

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


# vLLM v1 (0.32: v1/core/kv_cache_utils.py update_kv_cache_capacity): "CPU KV cache size: 316,551 tokens, Maximum
# concurrency for 1,024 tokens per request: 309.13x" ("GPU" on CUDA, the device type upper-cased elsewhere: "TPU").
_KV_TOKENS = re.compile(
    r"\b(?P<device>[A-Z]+(?: \+ host)?) KV cache size: (?P<tokens>[\d,]+) tokens"
    r"(?:, Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<conc>[\d.]+)x)?"
)
# The V0 engine's "# GPU blocks: 2048, # CPU blocks: 512" (vLLM < 0.10; "# cpu blocks: N" on its CPU backend)
_KV_BLOCKS = re.compile(r"# (?P<device>GPU|CPU|gpu|cpu|TPU|tpu) blocks: (?P<blocks>\d+)")


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


def kv_capacity(lines: list[str]) -> dict | None:
    """The KV cache the server reports having allocated: {"device", "tokens", "max_concurrency",
    "max_model_len", "blocks", "line"} (what a log line does not say is None; `line` is 1-based), or None when no
    line says it. The last report wins (a restarted engine reports again)."""
    found = None
    for i, line in enumerate(lines):
        m = _KV_TOKENS.search(line)
        if m:
            found = {
                "device": m["device"],
                "tokens": int(m["tokens"].replace(",", "")),
                "max_concurrency": float(m["conc"]) if m["conc"] else None,
                "max_model_len": int(m["len"].replace(",", "")) if m["len"] else None,
                "blocks": None,
                "line": i + 1,
            }
            continue
        b = _KV_BLOCKS.search(line)  # the first: GPU's in V0's "GPU …, CPU …" line (its CPU blocks are swap)
        if b:
            found = {"device": b["device"].upper(), "tokens": None, "max_concurrency": None,
                     "max_model_len": None, "blocks": int(b["blocks"]), "line": i + 1}  # fmt: skip
    return found


def kv_capacity_in_log(log: Path, offset: int = 0) -> dict | None:
    """`kv_capacity` of what follows byte `offset` of `log` (this start's part), line numbers counted in the whole
    file; None when unreadable or not reported."""
    try:
        data = Path(log).read_bytes()
    except OSError:
        return None
    found = kv_capacity(data[offset:].decode(errors="replace").splitlines())
    if found is not None:
        found["line"] += data[:offset].count(b"\n")
    return found
