"""What every fuzz case must show, whatever its input: the canaries outside the tree untouched and unread, and an
ending crosstune owns.

Canaries: files and folders beside the case's tree (never named to the command; reached only through links the
case put inside the tree) whose content holds a unique token. Their access and modification times are set in the
past first (atime before mtime, so the filesystem's relatime updates atime on the next read or listing); a read,
a listing, a write or a new or removed entry is seen in their stat, and the token must appear in no output, no file
under the tree and no request the fake endpoint received.

An ending crosstune owns: exit 0, 1 or 2 (plus what a command documents: eval's 3 for samples that could not be
generated), 2 only for typer's own usage errors; no traceback; a refusal (`error: ...`) is one line and the last
thing on stderr; nothing killed at the wall-clock or memory limit.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.harness import Outcome

PAST_S = 2 * 86400  # canaries' atime: two days ago; mtime one day ago
# click's own usage errors (typer parses with click): the only messages exit 2 may carry
USAGE_ERRORS = re.compile(
    r"No such option|No such command|Missing argument|Missing option|Got unexpected extra argument|"
    r"requires an argument|does not take a value|is not a valid (integer|float|boolean|.*range)|is not one of|"
    r"is not in the range|Path .*does not exist|Invalid value for '[^']+': (Input should be a valid|Unable to parse)"
)
USAGE_FRAME = ("Usage: crosstune", "Try 'crosstune")
PROBLEM_LINE = re.compile(r"^.+:\d+: (error|warning) at ")  # a file name may hold spaces (a fuzzed one)
# A refusal may be given as an exception from a library the command did not wrap (the message a bug prints)
BARE_EXCEPTION = re.compile(r"^\w*(Error|Exception): ", re.M)


@dataclass
class Canaries:
    root: Path
    token: str
    names: list[str] = field(default_factory=list)  # what is under root, listed once before the times are set

    def make(self, files: dict[str, str]) -> None:
        """Files under root (relative names; TOKEN in their text becomes the token)."""
        for name, text in files.items():
            path = self.root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.replace("TOKEN", self.token))

    def age(self) -> None:
        """Every time in the past: atime before mtime, so that a read or a listing moves atime (relatime). Nothing
        is listed after this until the command has run: the checks stat the names listed here."""
        self.names = [".", *sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*"))]
        now = time.time()
        for name in reversed(self.names):  # children before their folder
            os.utime(self.root / name, (now - PAST_S, now - PAST_S / 2), follow_symlinks=False)

    def snapshot(self) -> dict[str, tuple | None]:
        """{name: (kind, size, mtime_ns, atime_ns) or None when gone}, links not followed, nothing listed."""
        seen: dict[str, tuple | None] = {}
        for name in self.names:
            try:
                st = (self.root / name).lstat()
            except FileNotFoundError:
                seen[name] = None
                continue
            seen[name] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_atime_ns)
        return seen

    def appeared(self) -> list[str]:
        """Entries under root that were not there (lists the folders: call it last)."""
        now = {str(p.relative_to(self.root)) for p in self.root.rglob("*")}
        return sorted(now - set(self.names))

    def digest(self) -> dict[str, str]:
        """sha256 of each canary file (times put back after the read)."""
        found = {}
        for name in self.names:
            path = self.root / name
            if path.is_file() and not path.is_symlink():
                st = path.stat()
                found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        return found


def canary_problems(
    canaries: Canaries, before: dict, after: dict, digests: tuple[dict, dict], listed: set[str] = frozenset()
) -> list[str]:
    """What changed in the canaries; `listed`: folders the user named to the command, which it may list."""
    problems = []
    for name in before:
        was, now = before[name], after[name]
        where = canaries.root / name if name != "." else canaries.root
        if now is None:
            problems.append(f"canary {where} was removed")
        elif was[:3] != now[:3]:
            problems.append(f"canary {where} was changed (type, size or mtime)")
        elif was[3] != now[3] and name not in listed:
            problems.append(f"canary {where} was {'listed' if stat.S_ISDIR(now[0]) else 'read'} (its atime moved)")
    if digests[0] != digests[1]:
        problems.append(f"canary contents changed: {sorted(set(digests[0].items()) ^ set(digests[1].items()))}")
    return problems + [f"canary {canaries.root / name} appeared" for name in canaries.appeared()]


def leaks(token: str, outcome: Outcome, tree: Path, requests: str) -> list[str]:
    """Where the canaries' token shows: output, a file under the tree (links not followed), a request."""
    found = [
        f"the canary token is in the command's {n}"
        for n, t in (("stdout", outcome.out), ("stderr", outcome.err))
        if token in t
    ]
    if token in requests:
        found.append("the canary token was sent to the endpoint")
    for dirpath, _, files in os.walk(tree):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():  # a FIFO would block the read
                continue
            if token.encode() in path.read_bytes():
                found.append(f"the canary token is in {path}")
    return found


def ending_problems(outcome: Outcome, codes: frozenset[int], timeout_s: float) -> list[str]:
    """What is wrong with how the command ended (empty: nothing)."""
    text = outcome.out + outcome.err
    if outcome.code is None:
        return [f"still running after the wall-clock limit of {timeout_s:.0f} s (killed)"]
    problems = []
    if outcome.code not in codes:
        signal_note = f" (signal {-outcome.code})" if outcome.code < 0 else ""
        problems.append(f"exit status {outcome.code}{signal_note}, expected one of {sorted(codes)}")
    if "Traceback (most recent call last)" in text:
        problems.append("a traceback in the output")
    if "a bug in crosstune" in text:  # the CLI's last resort: an exception no owner turned into a refusal
        problems.append("a bug line (an unexpected exception)")
    if "MemoryError" in text:
        problems.append("MemoryError: over the address-space limit")
    flat = re.sub(r"[│╭╮╰╯─\s]+", " ", outcome.err)  # typer's box wraps its message across lines
    if outcome.code == 2 and not (all(f in outcome.err for f in USAGE_FRAME) and USAGE_ERRORS.search(flat)):
        problems.append("exit 2 without one of typer's own usage errors")
    if outcome.code != 2 and "╭─ Error" in text:
        problems.append("a usage box outside exit 2")
    errors = [line for line in outcome.err.splitlines() if line.startswith("error: ")]
    if len(errors) > 1:
        problems.append(f"{len(errors)} `error:` lines, one expected")
    tail = [line for line in outcome.err.splitlines() if line.strip()]
    while errors and len(tail) > 1 and tail[-1] != errors[-1] and PROBLEM_LINE.match(tail[-1]):
        tail.pop()  # a recipe's refusal lists every problem it found, one line each
    if errors and tail[-1] != errors[-1]:
        problems.append("the refusal is not one line (stderr goes on after `error: ...`)")
    if outcome.code == 1 and not text.strip():
        problems.append("exit 1 without a word")
    if outcome.code == 1 and not errors and BARE_EXCEPTION.search(outcome.err):
        problems.append("exit 1 on a bare exception message, not crosstune's `error: ...`")
    return problems
