"""What one generated hardware task is: its ports, spec text, reference body, a buggy twin and its stimulus."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Params = dict[str, Any]


@dataclass(frozen=True)
class Port:
    name: str
    direction: Literal["input", "output"]
    width: int = 1
    is_reg: bool = False  # output assigned from an always block, so it is declared `output reg`
    doc: str = ""  # short phrase for natural-language port lists, e.g. "select signal"


@dataclass(frozen=True)
class Reset:
    name: str = "reset"
    active_low: bool = False
    asynchronous: bool = False

    @property
    def asserted(self) -> str:
        """The Verilog condition that is true while reset is asserted."""
        return f"!{self.name}" if self.active_low else self.name

    def level(self, asserted: bool) -> str:
        return "1'b1" if asserted != self.active_low else "1'b0"


@dataclass(frozen=True)
class Design:
    """One task instance. Everything functional derives from `params`; phrasing may vary with a style rng."""

    task_kind: str  # the TaskKind it is an instance of
    params: Params
    slug: str  # unique per params within a task kind: eval problem name and default module name
    title: str  # noun phrase, e.g. "an 8-bit 4-to-1 multiplexer"
    ports: tuple[Port, ...]
    behaviour: tuple[str, ...]  # spec paragraphs; a paragraph containing a newline is kept preformatted
    body: str  # module items between the port list and `endmodule`
    mutant_body: str  # a plausible wrong implementation; the testbench must catch it
    reasoning: tuple[str, ...]  # design-thinking sentences for the <think> block
    clock: str | None = None
    reset: Reset | None = None
    directed: tuple[Mapping[str, int], ...] = ()  # input vectors applied before random ones
    stimulus: Mapping[str, str] = field(default_factory=dict)  # input -> Verilog expr for random values
    quiet_cycles: int = 0  # sequential: random cycles with reset held inactive, before random resets
    random_cycles: int = 200

    @property
    def sequential(self) -> bool:
        return self.clock is not None

    @property
    def inputs(self) -> tuple[Port, ...]:
        return tuple(p for p in self.ports if p.direction == "input")

    @property
    def outputs(self) -> tuple[Port, ...]:
        return tuple(p for p in self.ports if p.direction == "output")


@dataclass(frozen=True)
class TaskKind:
    """A parametrised hardware task (mux, adder, counter, ...): designs of it differ in their parameters."""

    name: str
    summary: str  # one line for --help and the manifest
    sample: Callable[[random.Random], Params]  # draw functional parameters
    build: Callable[[Params, random.Random], Design]  # rng only picks phrasing and code style


def clog2(n: int) -> int:
    """Bits needed to hold values 0..n-1 (at least 1)."""
    return max(1, (n - 1).bit_length())


def vrange(width: int) -> str:
    return f"[{width - 1}:0] " if width > 1 else ""


def lit(width: int, value: int) -> str:
    return f"{width}'d{value}"


def ones(width: int) -> str:
    return f"{{{width}{{1'b1}}}}"


def zeros(width: int) -> str:
    return f"{{{width}{{1'b0}}}}"


def bits_word(width: int) -> str:
    return "1 bit" if width == 1 else f"{width} bits"


def port_decl(port: Port) -> str:
    kind = "output reg" if port.is_reg else port.direction
    return f"{kind} {vrange(port.width)}{port.name}".replace("  ", " ")


def render_module(design: Design, name: str, body: str | None = None) -> str:
    """The full module text with an ANSI port list; `body` defaults to the reference implementation."""
    decls = ",\n".join(f"    {port_decl(p)}" for p in design.ports)
    text = design.body if body is None else body
    return f"module {name} (\n{decls}\n);\n\n{text.rstrip()}\n\nendmodule\n"


def seq_always(clock: str, reset: Reset | None) -> str:
    """The always-block header for a positive-edge process with an optional asynchronous reset."""
    if reset is not None and reset.asynchronous:
        edge = "negedge" if reset.active_low else "posedge"
        return f"always @(posedge {clock} or {edge} {reset.name})"
    return f"always @(posedge {clock})"


def reset_from(params: Params) -> Reset:
    low = bool(params.get("reset_active_low", False))
    return Reset(
        name="resetn" if low else "reset",
        active_low=low,
        asynchronous=bool(params.get("reset_async", False)),
    )


def reset_port(reset: Reset) -> Port:
    polarity = "active-low" if reset.active_low else "active-high"
    kind = "asynchronous" if reset.asynchronous else "synchronous"
    return Port(reset.name, "input", doc=f"{polarity} {kind} reset")


def reset_sentence(reset: Reset, effect: str) -> str:
    """VerilogEval-style reset sentence, e.g. 'Reset is active high synchronous, and should ...'."""
    polarity = "active low" if reset.active_low else "active high"
    kind = "asynchronous" if reset.asynchronous else "synchronous"
    return f"The {reset.name} input is {polarity} {kind}, and should {effect}."


def reset_stimulus(reset: Reset, one_in: int = 16) -> str:
    """Random reset expression asserting reset about once in `one_in` cycles."""
    pulse = f"(($random & {one_in - 1}) == 0)"
    return f"!{pulse}" if reset.active_low else pulse


def reset_suffix(params: Params) -> str:
    """Slug suffix naming the reset flavour: _ar for asynchronous, _n for active-low."""
    return ("_ar" if params.get("reset_async") else "") + ("_n" if params.get("reset_active_low") else "")


def sample_reset(rng: random.Random) -> Params:
    return {"reset_async": rng.random() < 0.4, "reset_active_low": rng.random() < 0.3}


POSEDGE_SENTENCE = "Assume all sequential logic is triggered on the positive edge of the clock."
