"""Bit-level combinational task kinds: Boolean functions, bitwise gates, parity/popcount, Gray code."""

from __future__ import annotations

import random

from crosstune.synth.design import Design, Params, Port, TaskKind, bits_word, clog2, lit, zeros

NAMES = "abcd"


def _rows(n: int) -> list[str]:
    return [format(r, f"0{n}b") for r in range(2**n)]


def _bool_body(n: int, truth: int, style: str) -> str:
    minterms = [r for r in range(2**n) if truth >> r & 1]
    concat = "{" + ", ".join(NAMES[:n]) + "}"
    if style == "case":
        lines = ["    always @(*) begin", f"        case ({concat})"]
        if minterms:
            items = ", ".join(lit(n, m) for m in minterms)
            lines.append(f"            {items}: out = 1'b1;")
        lines += ["            default: out = 1'b0;", "        endcase", "    end"]
        return "\n".join(lines)
    terms = []
    for m in minterms:
        bits = format(m, f"0{n}b")
        terms.append("(" + " & ".join(v if b == "1" else f"~{v}" for v, b in zip(NAMES[:n], bits, strict=True)) + ")")
    expr = " | ".join(terms) if terms else "1'b0"
    return f"    assign out = {expr};"


def _sample_bool(rng: random.Random) -> Params:
    n = rng.choice([2, 3, 3, 4, 4])
    return {"n_inputs": n, "truth": rng.randrange(1, 2 ** (2**n) - 1)}


def _build_bool(p: Params, rng: random.Random) -> Design:
    n, truth = p["n_inputs"], p["truth"]
    names = list(NAMES[:n])
    minterms = [r for r in range(2**n) if truth >> r & 1]
    style = rng.choice(["case", "sop"])
    concat = "{" + ", ".join(names) + "}"
    if rng.random() < 0.5 or n == 4:
        spec = (
            f"The output out is 1 exactly when {concat}, read as an unsigned number with {names[0]} as the "
            f"most significant bit, is one of {', '.join(map(str, minterms))}; otherwise out is 0."
        )
    else:
        table = [f"  {' '.join(names)} | out"] + [
            f"  {' '.join(r)} |  {truth >> i & 1}" for i, r in enumerate(_rows(n))
        ]
        spec = "The module implements the following truth table:\n\n" + "\n".join(table)
    how = (
        f"a case statement on {concat} that lists the true rows and defaults to 0, so out is assigned on every path"
        if style == "case"
        else "a sum of products: one AND term per true row, with a variable complemented where its bit is 0"
    )
    ratio = "most" if len(minterms) > 2 ** (n - 1) else "only some"
    return Design(
        task_kind="boolean_function",
        params=p,
        slug=f"bool{n}_{truth:0{max(1, 2**n // 4)}x}",
        title=f"a {n}-input combinational Boolean function",
        ports=tuple(Port(v, "input", doc=f"input {v}") for v in names)
        + (Port("out", "output", is_reg=style == "case", doc="function output"),),
        behaviour=(spec,),
        body=_bool_body(n, truth, style),
        mutant_body=_bool_body(n, truth ^ 1, style),
        reasoning=(
            f"There are {2**n} input combinations; out is 1 for {len(minterms)} of them "
            f"(rows {', '.join(map(str, minterms))}), so {ratio} rows are true.",
            f"I will write it as {how}.",
            f"Row 0 (all inputs 0) gives {truth & 1}, which is a quick sanity check of the encoding order.",
        ),
        directed=tuple({v: int(b) for v, b in zip(names, row, strict=True)} for row in _rows(n)),
        random_cycles=60,
    )


GATES = {
    "and": ("&", False),
    "or": ("|", False),
    "xor": ("^", False),
    "nand": ("&", True),
    "nor": ("|", True),
    "xnor": ("^", True),
}
GATE_BUG = {"and": "or", "or": "xor", "xor": "and", "nand": "nor", "nor": "xnor", "xnor": "nand"}


def _gate_expr(op: str, names: list[str]) -> str:
    sym, inverted = GATES[op]
    inner = f" {sym} ".join(names)
    return f"~({inner})" if inverted else inner


def _sample_gate(rng: random.Random) -> Params:
    return {"op": rng.choice(list(GATES)), "n_operands": rng.choice([2, 3]), "width": rng.randint(1, 32)}


def _build_gate(p: Params, rng: random.Random) -> Design:
    op, n, w = p["op"], p["n_operands"], p["width"]
    names = list("abc"[:n])
    procedural = rng.random() < 0.3

    def body(o: str) -> str:
        if procedural:
            return f"    always @(*) begin\n        out = {_gate_expr(o, names)};\n    end"
        return f"    assign out = {_gate_expr(o, names)};"

    vec = f"{w}-bit " if w > 1 else ""
    return Design(
        task_kind="vector_gate",
        params=p,
        slug=f"{op}{n}_w{w}",
        title=f"a {vec}bitwise {n}-input {op.upper()} gate",
        ports=tuple(Port(v, "input", w, doc=f"operand {v}") for v in names)
        + (Port("out", "output", w, is_reg=procedural, doc="result"),),
        behaviour=(
            f"Each bit of out is the {op.upper()} of the corresponding bits of {', '.join(names)}"
            + (" (all signals are the same width)." if w > 1 else "."),
        ),
        body=body(op),
        mutant_body=body(GATE_BUG[op]),
        reasoning=(
            f"This is {w} independent {op.upper()} gates side by side, one per bit position.",
            "Verilog's bitwise operators already work per bit on equal-width vectors, so one expression covers "
            "every bit: " + _gate_expr(op, names) + ".",
            "NAND, NOR and XNOR are the complements of AND, OR and XOR, so they need the ~ around the whole "
            "expression, not on each operand."
            if GATES[op][1]
            else "No inversion is needed for this gate.",
        ),
        directed=({v: 0 for v in names}, {v: (1 << w) - 1 for v in names}),
        random_cycles=50,
    )


PARITY_KINDS = ("even_parity", "odd_parity", "count_ones", "count_zeros")


def _parity_body(kind: str, w: int, cw: int, span: int) -> str:
    if kind == "even_parity":
        return "    assign parity = ^in;"
    if kind == "odd_parity":
        return "    assign parity = ~^in;"
    bit = "in[i]" if kind == "count_ones" else "!in[i]"
    return (
        "    integer i;\n\n    always @(*) begin\n"
        f"        count = {zeros(cw)};\n"
        f"        for (i = 0; i < {span}; i = i + 1)\n"
        f"            count = count + {bit};\n    end"
    )


def _sample_parity(rng: random.Random) -> Params:
    return {"kind": rng.choice(PARITY_KINDS), "width": rng.randint(2, 32)}


def _build_parity(p: Params, rng: random.Random) -> Design:
    kind, w = p["kind"], p["width"]
    cw = clog2(w + 1)
    if kind.endswith("parity"):
        total = "even" if kind == "even_parity" else "odd"
        out = Port("parity", "output", doc=f"{total} parity bit")
        spec = (
            f"Compute the {total} parity bit of the {w}-bit input in: parity is chosen so that the total number "
            f"of 1 bits in in and parity together is {total}."
        )
        title = f"a {w}-bit {total} parity generator"
        think = (
            "XOR-reducing all bits gives 1 when the count of ones is odd.",
            "For even parity that is exactly the bit to add; for odd parity it must be inverted, so ~^in."
            if total == "odd"
            else "For even parity the reduction ^in is already the answer.",
        )
        bug = "odd_parity" if kind == "even_parity" else "even_parity"
        mutant = _parity_body(bug, w, cw, w)
    else:
        what = "1" if kind == "count_ones" else "0"
        out = Port("count", "output", cw, is_reg=True, doc=f"number of {what} bits")
        spec = f"The output count is the number of bits of the {w}-bit input in that are {what}."
        title = f"a {w}-bit population counter of {what} bits"
        think = (
            f"The count ranges from 0 to {w}, which is {w + 1} values, so count needs clog2({w + 1}) = {cw} bits.",
            "A for loop in a combinational always block adds one bit at a time; the loop unrolls into an "
            "adder tree at synthesis.",
            "For counting zeros I add !in[i]; ~in[i] would be widened before inverting and add far too much."
            if what == "0"
            else "Each in[i] is zero-extended to the width of count before the addition.",
        )
        mutant = _parity_body(kind, w, cw, w - 1)
    return Design(
        task_kind="parity_popcount",
        params=p,
        slug=f"{kind}_w{w}",
        title=title,
        ports=(Port("in", "input", w, doc="input vector"), out),
        behaviour=(spec,),
        body=_parity_body(kind, w, cw, w),
        mutant_body=mutant,
        reasoning=think,
        directed=({"in": 0}, {"in": (1 << w) - 1}, {"in": 1}, {"in": 1 << (w - 1)}),
        random_cycles=80,
    )


def _gray_body(direction: str, w: int, buggy: bool) -> str:
    if direction == "bin2gray":
        return f"    assign gray = bin ^ (bin {'<<' if buggy else '>>'} 1);"
    select = "gray[i:0]" if buggy else f"gray[{w - 1}:i]"
    return (
        "    genvar i;\n\n    generate\n"
        f"        for (i = 0; i < {w}; i = i + 1) begin : g_bit\n"
        f"            assign bin[i] = ^{select};\n"
        "        end\n    endgenerate"
    )


def _sample_gray(rng: random.Random) -> Params:
    return {"direction": rng.choice(["bin2gray", "gray2bin"]), "width": rng.randint(2, 16)}


def _build_gray(p: Params, rng: random.Random) -> Design:
    d, w = p["direction"], p["width"]
    v = rng.randrange(1, 2**w)
    gray_v = v ^ (v >> 1)
    src, dst = ("bin", "gray") if d == "bin2gray" else ("gray", "bin")
    if d == "bin2gray":
        spec = f"Convert the {w}-bit binary number bin to its reflected binary Gray code gray."
        how = "Each Gray bit is the XOR of the binary bit and the next more significant one: gray = bin ^ (bin >> 1)."
        example = f"For example bin = {v:0{w}b} gives gray = {gray_v:0{w}b}."
    else:
        spec = f"Convert the {w}-bit reflected binary Gray code gray back to the binary number bin."
        how = (
            "Binary bit i is the XOR of all Gray bits from the MSB down to i, so bin[i] = ^gray[MSB:i]; a "
            "generate loop writes one reduction per bit without a combinational feedback chain."
        )
        example = f"For example gray = {gray_v:0{w}b} decodes to bin = {v:0{w}b}."
    return Design(
        task_kind="gray_code",
        params=p,
        slug=f"{d}_w{w}",
        title=f"a {w}-bit {'binary-to-Gray' if d == 'bin2gray' else 'Gray-to-binary'} converter",
        ports=(Port(src, "input", w, doc=f"{src} value"), Port(dst, "output", w, doc=f"{dst} value")),
        behaviour=(spec, f"Both {src} and {dst} are {bits_word(w)} wide."),
        body=_gray_body(d, w, False),
        mutant_body=_gray_body(d, w, True),
        reasoning=(how, example, "The most significant bit passes through unchanged in both directions."),
        directed=tuple({src: x} for x in (0, 1, (1 << w) - 1, 1 << (w - 1))),
        random_cycles=60,
    )


TASK_KINDS = (
    TaskKind("boolean_function", "2-4 input Boolean function from a truth table", _sample_bool, _build_bool),
    TaskKind("vector_gate", "bitwise AND/OR/XOR/NAND/NOR/XNOR on W-bit vectors", _sample_gate, _build_gate),
    TaskKind("parity_popcount", "even/odd parity bit or count of ones/zeros", _sample_parity, _build_parity),
    TaskKind("gray_code", "binary <-> Gray code converter", _sample_gray, _build_gray),
)
