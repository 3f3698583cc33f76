"""Verilog source as text: comments and strings blanked, so that a pattern finds only code. Read by the problem sets
(RTLLM's testbench and design names) and by the design screen (crosstune.evals.judge.screen)."""

from __future__ import annotations

import re

# Escaped identifiers are matched too so a `"` inside one (`\\x" `) cannot open a fake string.
_COMMENT_OR_STRING = re.compile(r'\\\S+|//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.DOTALL)


def blank_comments_and_strings(source: str) -> str:
    """Comments and string contents become spaces (newlines kept, so line numbers stay right)."""

    def blank(match: re.Match[str]) -> str:
        text = match.group(0)
        if text.startswith("\\"):
            return text
        inner = re.sub(r"[^\n]", " ", text)
        return f'"{inner[1:-1]}"' if text.startswith('"') else inner

    return _COMMENT_OR_STRING.sub(blank, source)
