"""Pull the Verilog out of a completion, recording which rule found it (reported per sample).

Order: reasoning in <think> is dropped first (code drafted while thinking is not the answer); a completion whose
thinking never closes has no answer at all (rule `unfinished_reasoning`, verdict U: nothing is simulated). Then
the last <answer> block (its last fenced block, else its text); [BEGIN]...[DONE]; the last ```verilog block
(else the last ``` block, else an unterminated trailing fence cut by max_tokens); `module <top>` ...
`endmodule`; else the text as is. Code-complete answers without a module header get the interface
prepended, as upstream does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

UNFINISHED = "unfinished_reasoning"
RULES = {
    UNFINISHED: "a <think> never closed (cut by max_tokens, or the model stopped while thinking): no answer",
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
_MODULE_SPAN = re.compile(r"\bmodule\b.*\bendmodule\b", re.DOTALL)
_VERILOG_TAGS = {"verilog", "systemverilog", "sv", "v"}


@dataclass(frozen=True)
class Extraction:
    code: str
    rule: str
    interface_prepended: bool = False


def _top_header(top: str) -> re.Pattern[str]:
    return re.compile(rf"\bmodule\s+{re.escape(top)}\b")


def reasoning_unfinished(text: str) -> bool:
    """Whether a <think> is still open at the end: the model never reached its answer."""
    return "<think>" in _THINK.sub("", text)


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


def _find(text: str, top: str) -> tuple[str, str]:
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
    if _top_header(top).search(text):
        span = _MODULE_SPAN.search(text)
        if span:
            return span.group(0), "module"
    return text, "raw"


def extract_code(completion: str, interface: str | None = None, top: str = "TopModule") -> Extraction:
    """The design in `completion`, whose module is named `top`; `interface` (code-complete) is prepended when the
    code has no `module <top>` header. Rule `unfinished_reasoning` carries no code."""
    if reasoning_unfinished(completion):
        return Extraction("", UNFINISHED)
    code, rule = _find(_drop_reasoning(completion), top)
    code = code.strip("\n") + "\n"
    if interface is not None and not _top_header(top).search(code):
        return Extraction(f"{interface.rstrip()}\n{code}", rule, interface_prepended=True)
    return Extraction(code, rule)
