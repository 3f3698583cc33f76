"""Bad input: one exception for strict mode, one ledger for lenient mode, so nothing is skipped silently; records
the length policy leaves out (too long for max_seq_len) are counted there too, in strict mode as well."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from crosstune.errors import CrosstuneError

MAX_LISTED = 10  # how many skipped records the stats list by name (the rest are only counted)


class DataError(CrosstuneError):
    """A record or a setting the data stage cannot use; the message says where, which field and why."""

    def __init__(self, where: str, reason: str, field_name: str | None = None, hint: str = ""):
        self.where, self.reason, self.field_name, self.hint = where, reason, field_name, hint
        head = f"{where}: " if where else ""
        name = f"field {field_name!r}: " if field_name else ""
        tail = f" ({hint})" if hint else ""
        super().__init__(f"{head}{name}{reason}{tail}")


@dataclass
class Ledger:
    """Strict: the first bad record raises DataError. Lenient: it is skipped, counted by kind and (first few) listed.
    A record the length policy drops is not bad: `drop` counts and lists it whatever the mode."""

    strict: bool
    skipped: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)
    dropped_examples: list[str] = field(default_factory=list)

    def bad(self, where: str, kind: str, reason: str, field_name: str | None = None, hint: str = "") -> None:
        error = DataError(where, reason, field_name, hint)
        if self.strict:
            raise error
        self.skipped[kind] += 1
        if len(self.examples) < MAX_LISTED:
            self.examples.append(str(error))

    def drop(self, where: str, kind: str, reason: str) -> None:
        """A well-formed record left out by the length policy (data.truncation): counted, never an error."""
        self.dropped[kind] += 1
        if len(self.dropped_examples) < MAX_LISTED:
            self.dropped_examples.append(f"{where}: {reason}")
