"""Text around a design: the CodeV-style system prompt, train prompts/responses, VerilogEval-style eval prompts."""

from __future__ import annotations

import random
import textwrap

from crosstune.synth.design import Design, Port, bits_word, render_module, vrange

# CodeV-R1's system prompt (its eval scripts and training data): reasoning in <think>, the final code in a
# ```verilog block inside <answer>. The evaluator's "codev" prompt style asks with this same text.
SYSTEM_PROMPT = (
    "You are a helpful assistant. The assistant first thinks about the reasoning process in the mind and then "
    "provides the user with the answer. The reasoning process and answer are enclosed within <think> </think> "
    "and <answer> </answer> tags, respectively, i.e., <think> reasoning process here </think><answer> answer "
    "here </answer>. Now the user asks you to write verilog code. After thinking, when you finally reach a "
    "conclusion, enclose the final verilog code in ```verilog ``` within <answer> </answer> tags. i.e., "
    "<answer> ```verilog\n module top_module(in, out, ...) ... ``` </answer>.\n"
)

EVAL_INTRO = (
    "I would like you to implement a module named {name} with the following interface. All input and output "
    "ports are one bit unless otherwise specified."
)
WRAP = 74  # reproduces the line breaks of VerilogEval's own prompts


def _wrap(paragraph: str) -> str:
    if "\n" in paragraph:  # tables and other preformatted text stay as written
        return paragraph
    return textwrap.fill(paragraph, WRAP, break_long_words=False, break_on_hyphens=False)


def _eval_ports(ports: tuple[Port, ...]) -> str:
    """VerilogEval's list: ' - input  in  (255 bits)', with names and widths aligned among the vector ports."""
    vectors = [p for p in ports if p.width > 1]
    pad = max((len(p.name) for p in vectors), default=0)
    digits = max((len(str(p.width)) for p in vectors), default=0)
    lines = []
    for p in ports:
        head = f" - {p.direction:<6} {p.name}"
        lines.append(f"{head:<{pad + 10}} ({p.width:>{digits}} bits)" if p.width > 1 else head)
    return "\n".join(lines)


def eval_prompt(design: Design, name: str = "TopModule") -> str:
    """A spec-to-rtl prompt in VerilogEval v2's layout (wrapped like the originals)."""
    parts = [_wrap(EVAL_INTRO.format(name=name)), _eval_ports(design.ports)]
    parts += [_wrap(p) for p in design.behaviour]
    return "\n\n".join(parts) + "\n"


def _port_bullets(ports: tuple[Port, ...], style: int) -> str:
    if style == 0:
        return "\n".join(f"- `{p.name}` ({p.direction}, {bits_word(p.width)}): {p.doc}" for p in ports)
    if style == 1:
        return "\n".join(f"- {p.direction} {vrange(p.width)}{p.name} -- {p.doc}" for p in ports)
    return "\n".join(f"* {p.name}: {p.direction}, {bits_word(p.width)} ({p.doc})" for p in ports)


OPENINGS = (
    "Design a Verilog module named `{name}` that implements {title}.",
    "Write synthesizable Verilog for {title}. The module must be called `{name}`.",
    "Implement {title} in Verilog as module `{name}`.",
    "I need {title} written in Verilog. Please name the module `{name}`.",
    "Create a Verilog module `{name}`: {title}.",
)
PORT_HEADERS = ("Ports:", "Interface:", "The module has these ports:", "Port list:")
SPEC_HEADERS = ("Behaviour:", "Specification:", "Functional description:", "")
CLOSINGS = (
    "",
    "Use only synthesizable constructs.",
    "Keep the port names exactly as listed.",
    "Do not add extra ports.",
)


def train_prompt(design: Design, name: str, rng: random.Random) -> str:
    """A natural-language task statement; a third of the time it is phrased like a VerilogEval problem."""
    if rng.random() < 0.3:
        return eval_prompt(design, name).rstrip()
    opening = rng.choice(OPENINGS).format(name=name, title=design.title)
    ports = f"{rng.choice(PORT_HEADERS)}\n{_port_bullets(design.ports, rng.randrange(3))}"
    header = rng.choice(SPEC_HEADERS)
    spec = "\n\n".join(design.behaviour)
    spec = f"{header}\n{spec}" if header else spec
    closing = rng.choice(CLOSINGS)
    return "\n\n".join(x for x in (opening, ports, spec, closing) if x)


THINK_OPENINGS = (
    "The task asks for {title} named {name}.",
    "Let me work out what {name} has to do: it is {title}.",
    "I need to write {title}, module {name}.",
    "This is {title}.",
)
THINK_CHECKS = (
    "Before writing it out I check the interface: {inputs} in, {outputs} out, names and widths as specified.",
    "Last check: the port names and widths match the spec ({inputs} -> {outputs}) and every output is driven.",
    "The ports are {inputs} as inputs and {outputs} as outputs; every output has exactly one driver.",
)
ANSWER_LINES = (
    "Here is the implementation:",
    "The complete module:",
    "Final Verilog code:",
    "",
)


def train_response(design: Design, name: str, rng: random.Random) -> str:
    """`<think>` reasoning, then `<answer>` with the code in a ```verilog fence (CodeV-R1 layout)."""
    inputs = ", ".join(p.name for p in design.inputs)
    outputs = ", ".join(p.name for p in design.outputs)
    think = [rng.choice(THINK_OPENINGS).format(title=design.title, name=name), *design.reasoning]
    think.append(rng.choice(THINK_CHECKS).format(inputs=inputs, outputs=outputs))
    lead = rng.choice(ANSWER_LINES)
    code = render_module(design, name).rstrip()
    answer = f"{lead}\n\n```verilog\n{code}\n```" if lead else f"```verilog\n{code}\n```"
    return f"<think>\n{' '.join(think[:2])}\n\n{' '.join(think[2:])}\n</think>\n<answer>\n{answer}\n</answer>"
