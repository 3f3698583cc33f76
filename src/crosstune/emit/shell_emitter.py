"""The one shell emitter: a line of crosstune's own shell (a template it wrote) with every value a quoted word. A
value is one word whatever it holds: shlex.quote for printable text; bash's $'...' with every other byte as \\xNN
when it holds a control character (a newline in single quotes is still one word, but a second line of the file).
The scripts this writes run under bash (`#!/bin/bash`, `bash -c`)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable


class Raw(str):
    """Shell text crosstune wrote itself, inserted as it is: a "$VARIABLE" reference, an already quoted line."""


def shell_word(value: str) -> str:
    """`value` as one shell word."""
    raw = os.fsencode(value)
    if value.isprintable() and raw == value.encode("utf-8", "surrogateescape"):
        return shlex.quote(value)
    printable = [chr(b) if 32 <= b < 127 and b not in b"'\\" else f"\\x{b:02x}" for b in raw]
    return "$'" + "".join(printable) + "'"


def shell_words(values: Iterable[str]) -> str:
    """A command line: each value one word."""
    return " ".join(shell_word(str(v)) for v in values)


def shell_line(template: str, **values: str | Raw | list[str] | tuple[str, ...]) -> str:
    """`template` (crosstune's own, one line) with each `{name}` filled: a Raw as it is, a list or tuple as words,
    anything else as one word."""
    if "\n" in template:
        raise ValueError("a shell template is one line")
    words = {
        name: v if isinstance(v, Raw) else shell_words(v) if isinstance(v, list | tuple) else shell_word(str(v))
        for name, v in values.items()
    }
    return template.format_map(words)
