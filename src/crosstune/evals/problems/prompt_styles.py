"""Chat messages for a problem, VerilogEval v2 style or CodeV-R1 style; the server applies the chat template.

VerilogEval style follows upstream's sv-generate: spec-to-rtl gets the RTL-designer system message,
"Question:"/"Answer:" and the [BEGIN]/[DONE] instruction; code-complete gets upstream's completion
system message and the spec as Verilog comments above the interface. The in-context examples are our own
(examples.py), not upstream's. CodeV-R1 style asks for reasoning in <think> and the code in a ```verilog
block inside <answer>.
"""

from __future__ import annotations

import hashlib
import json

from crosstune.evals.problems.examples import EXAMPLES, Example
from crosstune.evals.problems.problem_sets import CODE_COMPLETE, Problem
from crosstune.synth.prompts import SYSTEM_PROMPT

VERILOGEVAL = "verilogeval"
CODEV = "codev"
PROMPT_STYLES = (VERILOGEVAL, CODEV)

SPEC_SYSTEM = "You are a Verilog RTL designer that only writes code using correct Verilog syntax."
COMPLETE_SYSTEM = (
    "You only complete chats with syntax correct Verilog code. End the Verilog module code completion "
    "with 'endmodule'. Do not include module, input and output definitions."
)
COMPLETE_PREFIX = (
    "// Implement the Verilog module based on the following description. Assume that signals are "
    "positive clock/clk triggered unless otherwise stated.\n"
)
BEGIN_DONE_RULE = (
    "Enclose your code with [BEGIN] and [DONE]. Only output the code snippet\nand do NOT output anything else."
)
# CodeV-R1's own system prompt, the one its training records (and crosstune's synthetic ones) carry: a model
# fine-tuned on them is asked in exactly the words it was trained with.
CODEV_SYSTEM = SYSTEM_PROMPT

Message = dict[str, str]


def _question_answer(spec: str, answer: str | None) -> str:
    text = f"\nQuestion:\n{spec.strip()}\n".rstrip() + "\n\n" + BEGIN_DONE_RULE + "\n\nAnswer:\n"
    return text if answer is None else text + f"[BEGIN]\n{answer.strip()}\n[DONE]\n"


def _commented_spec(prompt: str) -> str:
    """Upstream code-complete layout: spec lines as `//` comments, then the module header verbatim."""
    lines, in_spec = [], True
    for line in prompt.splitlines():
        if "module TopModule" in line:
            lines.append("")
            in_spec = False
        lines.append(f"// {line}" if in_spec else line)
    return "\n".join(lines)


def _verilogeval_messages(problem: Problem, shots: list[Example]) -> list[Message]:
    if problem.task == CODE_COMPLETE:
        prefix = "".join(f"{_commented_spec(e.spec + chr(10) + e.interface)}\n{e.body}\n\n" for e in shots)
        user = prefix + COMPLETE_PREFIX + _commented_spec(problem.prompt)
        return [{"role": "system", "content": COMPLETE_SYSTEM}, {"role": "user", "content": user}]
    prefix = "".join(_question_answer(e.spec, e.solution) for e in shots)
    user = prefix + _question_answer(problem.prompt, None)
    return [{"role": "system", "content": SPEC_SYSTEM}, {"role": "user", "content": user}]


def _codev_question(spec: str, interface: str | None) -> str:
    if interface is None:
        return spec.strip()
    return f"{spec.strip()}\n\nComplete the module with this interface:\n{interface.strip()}"


def _codev_messages(problem: Problem, shots: list[Example]) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": CODEV_SYSTEM}]
    complete = problem.task == CODE_COMPLETE
    for e in shots:
        answer = f"<think>{e.reasoning}</think><answer>\n```verilog\n{e.solution.strip()}\n```\n</answer>"
        messages.append({"role": "user", "content": _codev_question(e.spec, e.interface if complete else None)})
        messages.append({"role": "assistant", "content": answer})
    messages.append({"role": "user", "content": _codev_question(problem.prompt, problem.ifc)})
    return messages


def build_messages(problem: Problem, style: str = VERILOGEVAL, shots: int = 0) -> list[Message]:
    """Chat messages asking for `problem`, with `shots` in-context examples (0..len(EXAMPLES))."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style {style!r}; choose one of {', '.join(PROMPT_STYLES)}")
    if not 0 <= shots <= len(EXAMPLES):
        raise ValueError(f"shots must be between 0 and {len(EXAMPLES)}, got {shots}")
    chosen = list(EXAMPLES[:shots])
    if style == CODEV:
        return _codev_messages(problem, chosen)
    return _verilogeval_messages(problem, chosen)


def prompt_hash(messages: list[Message]) -> str:
    """Stable short hash of a prompt, part of the completion cache key."""
    blob = json.dumps(messages, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]
