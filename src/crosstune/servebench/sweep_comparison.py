"""What makes serving sweeps comparable: the one rule `bench compare` and the report apply to what each sweep
declares (summary_cells.Sweep.declared, by label).

The workload must match, else the numbers measure different things (a cold sweep against a cached one: the prefix
cache stands in for the hardware). Of the subject being compared (hardware, model, KV-cache dtype, a drafter or
none) one dimension may differ, and is named; several at once are a warning, since a ratio can't be put down to any
of them. What a sweep does not record is reported as unchecked, never assumed equal."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from crosstune.servebench.summary_cells import Sweep

WORKLOAD = ("output length (tokens)", "api", "tokenizer", "load", "prompt cache")
SUBJECT = ("hardware", "model", "KV-cache dtype", "speculative decoding")
# Recorded only by newer sweeps: unrecorded on every sweep is no news (a warning only when some sweep records it).
RECENT = ("prompt cache",)
# What to do about a differing workload, where there is more to say than "compare sweeps of one kind".
REMEDY = {"prompt cache": "rerun a cold sweep that hit the cache without --seed or against a restarted server"}


@dataclass(frozen=True)
class Finding:
    text: str
    level: Literal["info", "warn", "error"] = "info"  # error: the sweeps must not be set side by side


def compare_sweeps(sweeps: Sequence[Sweep]) -> list[Finding]:
    """Errors for a differing workload, a warning when several subject dimensions differ at once or a figure is
    unrecorded, and an info line naming what is compared."""
    if len(sweeps) < 2:
        return []
    findings, subject = [], []
    for label in WORKLOAD + SUBJECT:
        values = [s.declared.get(label) for s in sweeps]
        known = {str(v) for v in values if v is not None}
        unknown = [s.label for s, v in zip(sweeps, values, strict=True) if v is None]
        shown = "; ".join(f"{s.label}: {short(v)}" for s, v in zip(sweeps, values, strict=True))
        if len(known) > 1 and label in WORKLOAD:
            remedy = f": compare sweeps of one kind; {REMEDY[label]}" if label in REMEDY else ""
            findings.append(Finding(f"the sweeps differ in {label} — {shown}{remedy}", "error"))
        elif len(known) > 1:
            subject.append((label, shown))
        if unknown and (known or label not in RECENT):
            findings.append(Finding(f"{label} not recorded for {', '.join(unknown)}: comparability unchecked", "warn"))
    if len(subject) > 1:
        names = " and ".join(label for label, _ in subject)
        details = " / ".join(shown for _, shown in subject)
        findings.append(
            Finding(f"the sweeps differ in {names} at once: a ratio can't be put down to either ({details})", "warn")
        )
    elif subject:
        findings.append(Finding(f"compared: {subject[0][0]} — {subject[0][1]}"))
    return findings


def short(value: object, hashed: bool = False) -> str:
    """A value for a message: a hash (`hashed`, or hex digits) cut to its first 12 characters, a long tuple to its
    length and first items."""
    text = str(value)
    if isinstance(value, tuple) and len(value) > 4:
        text = f"{len(value)} items ({', '.join(map(str, value[:3]))}, …)"
    long_hash = isinstance(value, str) and len(value) > 16 and (hashed or _HASH.match(value))
    return text[:12] + "…" if long_hash else text


_HASH = re.compile(r"^[0-9a-fA-F]+$")
