"""Comment lines written into a file's head (a recipe's import notes, a job spec's origin): each text one line, its
control characters written as escapes. A newline in an imported key, or a U+2028 that YAML reads as a line break,
would otherwise end the comment and start a line of the file's own syntax (a recipe key, a shell command)."""

from __future__ import annotations

from collections.abc import Iterable

from crosstune.errors import one_line


def comment_lines(texts: Iterable[str], marker: str = "#") -> str:
    """`texts` as comment lines (`# text\\n` each); a text is one line whatever it holds (crosstune.errors.one_line:
    every character that is not printable, line and paragraph separators included, as its escape)."""
    return "".join(f"{marker} {one_line(text)}\n" if text else f"{marker}\n" for text in texts)
