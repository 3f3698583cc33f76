"""VerilogEval v2-style `_test.sv` testbenches: a `stimulus_gen`, RefModule vs TopModule, X-tolerant compares."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import groupby

from crosstune.synth.design import Design, Port, vrange

TIMEOUT_PS = 1_000_000
HALF_PERIOD_PS = 5
COMB_EDGE = "@(posedge clk, negedge clk)"  # combinational stimulus changes on every tick...
SEQ_EDGE = "@(negedge clk)"  # ...sequential stimulus away from the active (rising) edge


def _value(port: Port, value: int) -> str:
    return f"{port.width}'d{value & ((1 << port.width) - 1)}"


def _driven(design: Design) -> tuple[Port, ...]:
    return tuple(p for p in design.inputs if p.name != design.clock)


def _vector(design: Design, vector: Mapping[str, int]) -> dict[str, str]:
    """Constant assignments for one directed vector; unspecified inputs are 0 and reset is inactive."""
    unknown = set(vector) - {p.name for p in _driven(design)}
    if unknown:
        raise ValueError(f"{design.slug}: directed vector names unknown inputs {sorted(unknown)}")
    out = {}
    for port in _driven(design):
        if port.name in vector:
            out[port.name] = _value(port, vector[port.name])
        elif design.reset is not None and port.name == design.reset.name:
            out[port.name] = design.reset.level(False)
        else:
            out[port.name] = _value(port, 0)
    return out


def _random(design: Design, reset_pulses: bool) -> dict[str, str]:
    out = {}
    for port in _driven(design):
        if design.reset is not None and port.name == design.reset.name:
            out[port.name] = design.stimulus[port.name] if reset_pulses else design.reset.level(False)
        else:
            out[port.name] = design.stimulus.get(port.name, "$random")
    return out


def _block(edge: str, assigns: Mapping[str, str], indent: str = "\t\t") -> list[str]:
    lines = [f"{indent}{edge} begin"]
    lines += [f"{indent}\t{name} <= {expr};" for name, expr in assigns.items()]
    return lines + [f"{indent}end"]


def _repeat(count: int, edge: str, assigns: Mapping[str, str]) -> list[str]:
    if count <= 0:
        return []
    lines = [f"\t\trepeat({count}) {edge} begin"]
    lines += [f"\t\t\t{name} <= {expr};" for name, expr in assigns.items()]
    return lines + ["\t\tend"]


def render_stimulus(design: Design) -> str:
    ports = ["\tinput clk"] + [f"\toutput logic {vrange(p.width)}{p.name}" for p in _driven(design)]
    edge = SEQ_EDGE if design.sequential else COMB_EDGE
    port_list = ",\n".join(ports)
    lines = [f"module stimulus_gen (\n{port_list}\n);", "", "\tinitial begin"]
    if design.sequential:
        # Reset is held over the first two rising edges so both designs start from a known state.
        start = _vector(design, {})
        if design.reset is not None:
            start[design.reset.name] = design.reset.level(True)
        lines += [f"\t\t{name} = {expr};" for name, expr in start.items()]
        lines.append(f"\t\trepeat(2) {edge};")
        directed = design.directed
    else:
        first = design.directed[0] if design.directed else {}
        lines += [f"\t\t{name} = {expr};" for name, expr in _vector(design, first).items()]
        directed = design.directed[1:]
    for vector, run in groupby(_vector(design, v) for v in directed):  # runs of one vector become a repeat
        count = len(list(run))
        lines += _repeat(count, edge, vector) if count > 1 else _block(edge, vector)
    if design.sequential:
        lines += _repeat(design.quiet_cycles, edge, _random(design, reset_pulses=False))
    lines += _repeat(design.random_cycles, edge, _random(design, reset_pulses=True))
    lines += [f"\t\t{edge};", "\t\t#1 $finish;", "\tend", "", "endmodule"]
    return "\n".join(lines) + "\n"


def _connections(design: Design, suffix: str | None) -> str:
    conns = [f"\t\t.{p.name}({p.name})" for p in design.inputs]
    conns += [f"\t\t.{p.name}({p.name}_{suffix})" for p in design.outputs] if suffix else []
    return ",\n".join(conns)


def render_tb(design: Design) -> str:
    """The `tb` module in VerilogEval v2's layout: stimulus, reference and design side by side, mismatches counted per
    output on every clock edge. Over 80 lines because it is one template, kept whole so it reads as the Verilog it
    writes."""
    outs = design.outputs
    fields = "".join(f"\t\tint errors_{p.name};\n\t\tint errortime_{p.name};\n" for p in outs)
    decls = [f"\tlogic {vrange(p.width)}{p.name};" for p in _driven(design)]
    for p in outs:
        decls += [f"\tlogic {vrange(p.width)}{p.name}_ref;", f"\tlogic {vrange(p.width)}{p.name}_dut;"]
    refs = ", ".join(f"{p.name}_ref" for p in outs)
    duts = ", ".join(f"{p.name}_dut" for p in outs)
    stim_conns = ",\n".join(["\t\t.clk(clk)"] + [f"\t\t.{p.name}({p.name})" for p in _driven(design)])
    hints = []
    per_output = []
    for p in outs:
        n = p.name
        hints.append(
            f"\t\tif (stats1.errors_{n}) $display(\"Hint: Output '%s' has %0d mismatches. "
            f'First mismatch occurred at time %0d.", "{n}", stats1.errors_{n}, stats1.errortime_{n});\n'
            f'\t\telse $display("Hint: Output \'%s\' has no mismatches.", "{n}");'
        )
        per_output.append(
            f"\t\tif ({n}_ref !== ( {n}_ref ^ {n}_dut ^ {n}_ref ))\n"
            f"\t\tbegin if (stats1.errors_{n} == 0) stats1.errortime_{n} = $time;\n"
            f"\t\t\tstats1.errors_{n} = stats1.errors_{n}+1'b1; end"
        )
    return f"""module tb();

	typedef struct packed {{
		int errors;
		int errortime;
{fields}
		int clocks;
	}} stats;

	stats stats1;

	reg clk=0;
	initial forever
		#{HALF_PERIOD_PS} clk = ~clk;

{chr(10).join(decls)}

	wire tb_match;		// Verification

	stimulus_gen stim1 (
{stim_conns} );
	RefModule good1 (
{_connections(design, "ref")} );

	TopModule top_module1 (
{_connections(design, "dut")} );

	final begin
{chr(10).join(hints)}

		$display("Hint: Total mismatched samples is %1d out of %1d samples\\n", stats1.errors, stats1.clocks);
		$display("Simulation finished at %0d ps", $time);
		$display("Mismatches: %1d in %1d samples", stats1.errors, stats1.clocks);
	end

	// Verification: XORs on the right make any X in the reference match anything,
	// but an X from the design under test only matches an X in the reference.
	assign tb_match = ( {{ {refs} }} === ( {{ {refs} }} ^ {{ {duts} }} ^ {{ {refs} }} ) );
	// Every edge of the sampling clock is one sample; outputs settled during the previous half period.
	always @(posedge clk, negedge clk) begin

		stats1.clocks++;
		if (!tb_match) begin
			if (stats1.errors == 0) stats1.errortime = $time;
			stats1.errors++;
		end
{chr(10).join(per_output)}

	end

	// Bound simulated time even if the design under test never lets the stimulus finish.
	initial begin
		#{TIMEOUT_PS}
		$display("TIMEOUT");
		$finish();
	end

endmodule
"""


def render_testbench(design: Design) -> str:
    """The whole `_test.sv`: timescale, stimulus_gen and tb."""
    if design.clock not in (None, "clk"):
        raise ValueError(f"{design.slug}: the testbench drives a clock named clk, not {design.clock}")
    if any(p.width > 32 for p in _driven(design)):
        raise ValueError(f"{design.slug}: inputs wider than 32 bits need a wider random source")
    return (
        "`timescale 1 ps/1 ps\n`define OK 12\n`define INCORRECT 13\n\n"
        + render_stimulus(design)
        + "\n"
        + render_tb(design)
    )
