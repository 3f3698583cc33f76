"""In-context examples for k-shot prompts, written for this project (not VerilogEval's own examples)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    """A solved problem: spec text, module header, body after the header, and a short reasoning trace."""

    spec: str
    interface: str
    body: str
    reasoning: str

    @property
    def solution(self) -> str:
        return f"{self.interface}\n{self.body}"


EXAMPLES: tuple[Example, ...] = (
    Example(
        spec=(
            "I would like you to implement a module named TopModule with the following interface. All input "
            "and output ports are one bit unless otherwise specified.\n\n"
            " - input  sel\n - input  a (8 bits)\n - input  b (8 bits)\n - output out (8 bits)\n\n"
            "The module should implement a 2-to-1 multiplexer. When sel is 0, out is a; when sel is 1, out is b."
        ),
        interface="module TopModule (\n  input  logic       sel,\n  input  logic [7:0] a,\n"
        "  input  logic [7:0] b,\n  output logic [7:0] out\n);",
        body="\n  assign out = sel ? b : a;\n\nendmodule",
        reasoning="A multiplexer is combinational, so one continuous assignment with ?: selects the input.",
    ),
    Example(
        spec=(
            "I would like you to implement a module named TopModule with the following interface. All input "
            "and output ports are one bit unless otherwise specified.\n\n"
            " - input  clk\n - input  reset\n - output q (4 bits)\n\n"
            "The module should implement a 4-bit binary counter that counts from 0 to 15 and wraps around. "
            "The reset input is active high and synchronous, and resets the counter to 0. Assume all "
            "sequential logic is triggered on the positive edge of the clock."
        ),
        interface="module TopModule (\n  input  logic       clk,\n  input  logic       reset,\n"
        "  output logic [3:0] q\n);",
        body="\n  always @(posedge clk) begin\n    if (reset)\n      q <= 4'd0;\n    else\n"
        "      q <= q + 4'd1;\n  end\n\nendmodule",
        reasoning="The reset is synchronous, so it is checked inside the clocked block, not in its "
        "sensitivity list; a 4-bit addition wraps from 15 to 0 by itself.",
    ),
    Example(
        spec=(
            "I would like you to implement a module named TopModule with the following interface. All input "
            "and output ports are one bit unless otherwise specified.\n\n"
            " - input  clk\n - input  in\n - output rise\n\n"
            "The output rise should be 1 for one clock cycle after the cycle in which in changed from 0 to "
            "1. Assume all sequential logic is triggered on the positive edge of the clock."
        ),
        interface="module TopModule (\n  input  logic clk,\n  input  logic in,\n  output logic rise\n);",
        body="\n  logic prev;\n\n  always @(posedge clk) begin\n    prev <= in;\n"
        "    rise <= in & ~prev;\n  end\n\nendmodule",
        reasoning="Register the previous input; a rising edge is the current input high while the previous "
        "one was low, and registering that result delays it by one cycle as asked.",
    ),
)
