"""State-holding task kinds: shift registers, edge detectors, register files."""

from __future__ import annotations

import random

from crosstune.synth.design import (
    POSEDGE_SENTENCE,
    Design,
    Params,
    Port,
    Reset,
    TaskKind,
    bits_word,
    clog2,
    reset_from,
    reset_port,
    reset_sentence,
    reset_stimulus,
    reset_suffix,
    sample_reset,
    seq_always,
    zeros,
)


def _shift_body(p: Params, bug: bool) -> str:
    w, d = p["width"], p["direction"]
    rst = reset_from(p)
    left, right = f"q <= {{q[{w - 2}:0], sin}};", f"q <= {{sin, q[{w - 1}:1]}};"
    if bug:  # shifting the wrong way (or with the direction control inverted)
        left, right = right, left
    step = {"left": [left], "right": [right], "bidir": ["if (dir)", f"    {left}", "else", f"    {right}"]}[d]
    lines = [f"    {seq_always('clk', rst)} begin", f"        if ({rst.asserted})", f"            q <= {zeros(w)};"]
    if p["load"]:
        lines += ["        else if (load)", "            q <= d;"]
    lines.append("        else if (ena) begin" if p["enable"] else "        else begin")
    lines += [f"            {s}" for s in step]
    return "\n".join(lines + ["        end", "    end"])


def _sample_shift(rng: random.Random) -> Params:
    return {
        "width": rng.randint(2, 32),
        "direction": rng.choice(["left", "right", "bidir"]),
        "load": rng.random() < 0.5,
        "enable": rng.random() < 0.5,
        **sample_reset(rng),
    }


def _build_shift(p: Params, rng: random.Random) -> Design:
    w, d = p["width"], p["direction"]
    rst = reset_from(p)
    ports = [Port("clk", "input", doc="clock"), reset_port(rst)]
    order = ["reset"]
    if p["load"]:
        ports += [Port("load", "input", doc="parallel load"), Port("d", "input", w, doc="parallel data")]
        order.append("load")
    if p["enable"]:
        ports.append(Port("ena", "input", doc="shift enable"))
        order.append("ena")
    if d == "bidir":
        ports.append(Port("dir", "input", doc="1 = shift left, 0 = shift right"))
    ports += [Port("sin", "input", doc="serial input"), Port("q", "output", w, is_reg=True, doc="register contents")]
    moves = {
        "left": "shifts left by one: every bit moves one position toward the MSB and sin enters q[0]",
        "right": f"shifts right by one: every bit moves one position toward the LSB and sin enters q[{w - 1}]",
        "bidir": f"shifts left (toward the MSB, sin entering q[0]) when dir is 1, and right (toward the LSB, "
        f"sin entering q[{w - 1}]) when dir is 0",
    }[d]
    spec = [f"Build a {w}-bit shift register q. On each rising clock edge it {moves}."]
    if p["load"]:
        spec.append("When load is 1 the register is loaded with d instead of shifting.")
    if p["enable"]:
        spec.append("When ena is 0 (and no load happens) q keeps its value.")
    if len(order) > 1:
        spec.append("Priority, highest first: " + ", ".join(order) + ".")
    spec += [reset_sentence(rst, "clear q to 0"), POSEDGE_SENTENCE]
    concat = f"{{q[{w - 2}:0], sin}}" if d != "right" else f"{{sin, q[{w - 1}:1]}}"
    return Design(
        task_kind="shift_register",
        params=p,
        slug=f"shift{d}_w{w}" + ("_load" if p["load"] else "") + ("_en" if p["enable"] else "") + reset_suffix(p),
        title=f"a {w}-bit {'bidirectional' if d == 'bidir' else d + '-shift'} register",
        ports=tuple(ports),
        behaviour=tuple(spec),
        body=_shift_body(p, False),
        mutant_body=_shift_body(p, True),
        reasoning=(
            f"A shift is just a concatenation: {concat} drops the bit that falls off the end and inserts sin.",
            "The if/else-if chain follows the stated priority (" + " > ".join(order) + "), so reset wins over "
            "everything else.",
            f"q is {bits_word(w)} wide; all updates use non-blocking assignments in one clocked block.",
        ),
        clock="clk",
        reset=rst,
        stimulus={
            rst.name: reset_stimulus(rst, 32),
            "load": "($random & 7) == 0",
            "ena": "($random & 3) != 0",
            "dir": "(($random & 7) == 0) ? !dir : dir",
        },
        quiet_cycles=40,
        random_cycles=200,
    )


EDGE_NAMES = {"rising": "pedge", "falling": "nedge", "both": "anyedge"}
EDGE_EXPR = {"rising": "in & ~prev", "falling": "~in & prev", "both": "in ^ prev"}
EDGE_BUG = {"rising": "falling", "falling": "rising", "both": "rising"}


def _edge_body(p: Params, bug: bool) -> str:
    w, kind, registered = p["width"], p["kind"], p["timing"] == "registered"
    out = EDGE_NAMES[kind]
    expr = EDGE_EXPR[EDGE_BUG[kind] if bug else kind]
    lines = [f"    reg [{w - 1}:0] prev;" if w > 1 else "    reg prev;", "", "    always @(posedge clk) begin"]
    inner = ["prev <= in;"] + ([f"{out} <= {expr};"] if registered else [])
    if p["reset"]:
        clear = ["prev <= " + zeros(w) + ";"] + ([f"{out} <= {zeros(w)};"] if registered else [])
        lines += ["        if (reset) begin"] + [f"            {s}" for s in clear] + ["        end else begin"]
        lines += [f"            {s}" for s in inner] + ["        end"]
    else:
        lines += [f"        {s}" for s in inner]
    lines.append("    end")
    if not registered:
        lines += ["", f"    assign {out} = {expr};"]
    return "\n".join(lines)


def _sample_edge(rng: random.Random) -> Params:
    return {
        "width": rng.randint(1, 16),
        "kind": rng.choice(list(EDGE_NAMES)),
        "timing": rng.choice(["registered", "combinational"]),
        "reset": rng.random() < 0.5,
    }


def _build_edge(p: Params, rng: random.Random) -> Design:
    w, kind, registered = p["width"], p["kind"], p["timing"] == "registered"
    out = EDGE_NAMES[kind]
    change = {"rising": "from 0 to 1", "falling": "from 1 to 0", "both": "in either direction"}[kind]
    sig = "in[i]" if w > 1 else "in"
    osig = f"{out}[i]" if w > 1 else out
    each = f"For each bit i of the {w}-bit input in, d" if w > 1 else "D"
    if registered:
        timing = (
            f"{each}etect when the input changes {change} between one clock cycle and the next. The output "
            f"bit {osig} should be set (for one cycle) the cycle after the transition occurs, that is, it is "
            f"a registered output updated at the same clock edge that samples the new value of {sig}."
        )
    else:
        timing = (
            f"{each}etect when the input differs {change} relative to its value sampled at the previous "
            f"rising clock edge. {osig} is combinational: it is 1 while the current {sig} and the value "
            "registered at the last clock edge show that transition."
        )
    spec = [timing]
    if p["reset"]:
        spec.append(
            reset_sentence(Reset(), "clear the stored previous value" + (f" and {out}" if registered else "") + " to 0")
        )
    spec += [f"{out} has the same width as in ({bits_word(w)}).", POSEDGE_SENTENCE]
    ports = [Port("clk", "input", doc="clock")]
    if p["reset"]:
        ports.append(reset_port(Reset()))
    ports += [
        Port("in", "input", w, doc="monitored signal"),
        Port(out, "output", w, is_reg=registered, doc=f"{kind}-edge flags"),
    ]
    return Design(
        task_kind="edge_detector",
        params=p,
        slug=f"{kind}edge_w{w}_{'reg' if registered else 'comb'}" + ("_rst" if p["reset"] else ""),
        title=f"a {w}-bit {kind}-edge detector ({'registered' if registered else 'combinational'} output)",
        ports=tuple(ports),
        behaviour=tuple(spec),
        body=_edge_body(p, False),
        mutant_body=_edge_body(p, True),
        reasoning=(
            "I need last cycle's value of the input, so a register prev captures in on every rising edge.",
            f"The edge condition is {EDGE_EXPR[kind]}, bit by bit: "
            + {
                "rising": "now 1 and previously 0.",
                "falling": "now 0 and previously 1.",
                "both": "any difference between now and before.",
            }[kind],
            "Computing it inside the clocked block delays the flag by one cycle, exactly as specified."
            if registered
            else "A continuous assignment makes the flag visible in the same cycle as the change.",
        ),
        clock="clk",
        reset=Reset() if p["reset"] else None,
        stimulus={"reset": reset_stimulus(Reset(), 32), "in": "$random"},
        quiet_cycles=20,
        random_cycles=150,
    )


def _regfile_body(p: Params, bug: bool) -> str:
    n, w, reads = p["n_regs"], p["width"], p["read_ports"]
    write = "begin" if bug else "if (we) begin"  # the bug writes every cycle, ignoring we
    lines = [f"    reg [{w - 1}:0] regs [0:{n - 1}];"]
    if p["reset"]:
        lines += [
            "    integer i;",
            "",
            "    always @(posedge clk) begin",
            "        if (reset) begin",
            f"            for (i = 0; i < {n}; i = i + 1)",
            f"                regs[i] <= {zeros(w)};",
            f"        end else {write}",
            "            regs[waddr] <= wdata;",
            "        end",
            "    end",
        ]
    else:
        lines += [
            "",
            "    always @(posedge clk) begin",
            f"        {write}",
            "            regs[waddr] <= wdata;",
            "        end",
            "    end",
        ]
    lines.append("")
    lines += [f"    assign rdata{k} = regs[raddr{k}];" for k in range(reads)]
    return "\n".join(lines)


def _sample_regfile(rng: random.Random) -> Params:
    return {
        "n_regs": rng.choice([2, 4, 8, 16]),
        "width": rng.choice([4, 8, 16, 32]),
        "read_ports": rng.choice([1, 2]),
        "reset": rng.random() < 0.6,
    }


def _build_regfile(p: Params, rng: random.Random) -> Design:
    n, w, reads = p["n_regs"], p["width"], p["read_ports"]
    aw = clog2(n)
    ports = [Port("clk", "input", doc="clock")]
    if p["reset"]:
        ports.append(reset_port(Reset()))
    ports += [
        Port("we", "input", doc="write enable"),
        Port("waddr", "input", aw, doc="write address"),
        Port("wdata", "input", w, doc="write data"),
    ]
    for k in range(reads):
        ports += [
            Port(f"raddr{k}", "input", aw, doc=f"read address {k}"),
            Port(f"rdata{k}", "output", w, doc=f"read data {k}"),
        ]
    spec = [
        f"Build a register file of {n} registers, each {bits_word(w)} wide, with one write port and "
        f"{reads} read port{'s' if reads > 1 else ''}.",
        "On a rising clock edge with we = 1, register waddr is written with wdata. Reads are combinational: "
        + " and ".join(f"rdata{k} always shows the current contents of register raddr{k}" for k in range(reads))
        + "; a write becomes visible after the clock edge that performs it.",
    ]
    if p["reset"]:
        spec.append(reset_sentence(Reset(), "clear every register to 0"))
    spec.append(POSEDGE_SENTENCE)
    return Design(
        task_kind="register_file",
        params=p,
        slug=f"regfile{n}x{w}_r{reads}" + ("_rst" if p["reset"] else ""),
        title=f"a {n}x{w} register file with {reads} read port{'s' if reads > 1 else ''}",
        ports=tuple(ports),
        behaviour=tuple(spec),
        body=_regfile_body(p, False),
        mutant_body=_regfile_body(p, True),
        reasoning=(
            f"{n} registers need a {aw}-bit address; the storage is an array reg [{w - 1}:0] regs [0:{n - 1}].",
            "Writes happen in one clocked block; reads are continuous assignments indexing the array, which "
            "gives the asynchronous read the spec asks for.",
            "A synchronous reset clears the array with a for loop that unrolls at elaboration."
            if p["reset"]
            else "There is no reset, so registers hold X until they are first written.",
        ),
        clock="clk",
        reset=Reset() if p["reset"] else None,
        stimulus={"reset": reset_stimulus(Reset(), 64)},
        quiet_cycles=60,
        random_cycles=200,
    )


TASK_KINDS = (
    TaskKind(
        "shift_register",
        "left/right/bidirectional shift register with optional load and enable",
        _sample_shift,
        _build_shift,
    ),
    TaskKind(
        "edge_detector",
        "rising/falling/any-edge detector, registered or combinational output",
        _sample_edge,
        _build_edge,
    ),
    TaskKind(
        "register_file",
        "N x W register file, 1 write and 1-2 combinational read ports",
        _sample_regfile,
        _build_regfile,
    ),
)
