"""Pull the Verilog out of a completion, recording which rule found it (reported per sample).

Order: reasoning in <think> is dropped first (code drafted while thinking is not the answer); then the
last <answer> block (its last fenced block, else its text); [BEGIN]...[DONE]; the last ```verilog block
(else the last ``` block, else an unterminated trailing fence cut by max_tokens); `module TopModule` ...
`endmodule`; else the text as is. Code-complete answers without a module header get the interface
prepended, as upstream does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RULES = {
    "answer_fenced": "last fenced block inside the last <answer>",
    "answer": "text of the last <answer> (no fenced block inside)",
    "begin_done": "between [BEGIN] and [DONE]",
    "fenced_verilog": "last ```verilog / ```systemverilog block",
    "fenced": "last ``` block",
    "fenced_unterminated": "an opening ``` never closed (cut by max_tokens): the rest of the text",
    "module": "from the first `module` to the last `endmodule`",
    "raw": "no rule matched: the whole completion",
}

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|\Z)", re.DOTALL)
_BEGIN_DONE = re.compile(r"\[BEGIN\](.*?)\[DONE\]", re.DOTALL)
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
_FENCE_OPEN = re.compile(r"^[ \t]*```[ \t]*[\w+-]*[^\n]*\n", re.MULTILINE)
_TOP_HEADER = re.compile(r"\bmodule\s+TopModule\b")
_MODULE_SPAN = re.compile(r"\bmodule\b.*\bendmodule\b", re.DOTALL)
_VERILOG_TAGS = {"verilog", "systemverilog", "sv", "v"}


@dataclass(frozen=True)
class Extraction:
    code: str
    rule: str
    interface_prepended: bool = False


def _drop_reasoning(text: str) -> str:
    text = _THINK.sub("", text)
    if "</think>" in text:  # templates that open <think> inside the prompt leave only the closing tag
        text = text.rsplit("</think>", 1)[1]
    return text


def _fenced(text: str) -> tuple[str, str] | None:
    blocks = list(_FENCE.finditer(text))
    tail_start = blocks[-1].end() if blocks else 0
    opening = _FENCE_OPEN.search(text, tail_start)
    if opening is not None:
        return text[opening.end() :], "fenced_unterminated"
    if not blocks:
        return None
    tagged = [b for b in blocks if b.group(1).lower() in _VERILOG_TAGS]
    if tagged:
        return tagged[-1].group(2), "fenced_verilog"
    return blocks[-1].group(2), "fenced"


def _find(text: str) -> tuple[str, str]:
    answers = _ANSWER.findall(text)
    if answers:
        inner = _fenced(answers[-1])
        return (inner[0], "answer_fenced") if inner else (answers[-1], "answer")
    begin_done = _BEGIN_DONE.search(text)
    if begin_done:
        return begin_done.group(1), "begin_done"
    fenced = _fenced(text)
    if fenced:
        return fenced
    if _TOP_HEADER.search(text):
        span = _MODULE_SPAN.search(text)
        if span:
            return span.group(0), "module"
    return text, "raw"


def extract_code(completion: str, interface: str | None = None) -> Extraction:
    """The design in `completion`; `interface` (code-complete) is prepended when no TopModule header."""
    code, rule = _find(_drop_reasoning(completion))
    code = code.strip("\n") + "\n"
    if interface is not None and not _TOP_HEADER.search(code):
        return Extraction(f"{interface.rstrip()}\n{code}", rule, interface_prepended=True)
    return Extraction(code, rule)
