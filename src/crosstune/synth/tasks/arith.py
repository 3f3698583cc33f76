"""Arithmetic task kinds: adders/subtractors, magnitude comparators, small ALUs."""

from __future__ import annotations

import random

from crosstune.synth.design import Design, Params, Port, TaskKind, bits_word, clog2, lit, zeros

CARRY_NAMES = {"add": ("sum", "cin", "cout"), "sub": ("diff", "bin", "bout"), "addsub": ("sum", "", "cout")}


def _adder_body(p: Params, bug: bool) -> str:
    w, op = p["width"], p["op"]
    res, cin, cout = CARRY_NAMES[op]
    has_in, has_out = p["carry_in"], p["carry_out"]
    lhs = f"{{{cout}, {res}}}" if has_out else res
    if op == "addsub":
        b_eff = "b" if bug else f"b ^ {{{w}{{sub}}}}"  # the bug forgets to invert b when subtracting
        return f"    wire [{w - 1}:0] b_eff = {b_eff};\n\n    assign {lhs} = a + b_eff + sub;"
    sym = "+" if op == "add" else "-"
    a, b = ("a", "b") if op == "add" or not has_out else ("{1'b0, a}", "{1'b0, b}")
    tail = f" {sym} {cin}" if has_in and not bug else ""
    if bug and not has_in:
        if has_out:
            return f"    assign {lhs} = {{1'b0, a {sym} b}};"  # the carry/borrow is lost to self-determined width
        return f"    assign {res} = {'a ^ b' if op == 'add' else 'b - a'};"
    return f"    assign {lhs} = {a} {sym} {b}{tail};"


def _sample_adder(rng: random.Random) -> Params:
    op = rng.choice(["add", "add", "sub", "addsub"])
    return {
        "op": op,
        "width": rng.randint(1, 32),
        "carry_in": op != "addsub" and rng.random() < 0.5,
        "carry_out": rng.random() < 0.6,
    }


def _build_adder(p: Params, rng: random.Random) -> Design:
    w, op = p["width"], p["op"]
    res, cin, cout = CARRY_NAMES[op]
    ports = [Port("a", "input", w, doc="first operand"), Port("b", "input", w, doc="second operand")]
    if op == "addsub":
        ports.append(Port("sub", "input", doc="1 to subtract"))
        spec = [
            f"Build a {w}-bit adder-subtractor. When sub is 0, {res} = a + b; when sub is 1, {res} = a - b. "
            f"Subtraction is done as a + ~b + 1, that is, b is inverted and sub is used as the carry-in."
        ]
    elif op == "add":
        spec = [f"Build a {w}-bit adder: {res} = a + b" + (f" + {cin}" if p["carry_in"] else "") + "."]
    else:
        spec = [f"Build a {w}-bit subtractor: {res} = a - b" + (f" - {cin}" if p["carry_in"] else "") + "."]
    if p["carry_in"]:
        ports.append(Port(cin, "input", doc="carry in" if op == "add" else "borrow in"))
    ports.append(Port(res, "output", w, doc="result"))
    if p["carry_out"]:
        ports.append(Port(cout, "output", doc="carry out" if cout == "cout" else "borrow out"))
        spec.append(
            f"{cout} is the carry out of the most significant bit."
            if op != "sub"
            else f"{cout} is 1 when the subtraction borrows, that is, when a is smaller than b"
            + (f" + {cin}." if p["carry_in"] else ".")
        )
    else:
        spec.append(f"The result wraps around modulo 2^{w}.")
    spec.append("a, b and the result are unsigned and " + bits_word(w) + " wide.")
    flags = "".join(f"_{n}" for n, on in ((cin, p["carry_in"]), (cout, p["carry_out"])) if on and n)
    x, y = rng.randrange(2**w), rng.randrange(2**w)
    total = x + y if op != "sub" else x - y
    example = (
        f"For example a = {x}, b = {y}: the exact {'sum' if op != 'sub' else 'difference'} is {total}, so the "
        f"{bits_word(w)} result is {total % 2**w}"
        + (f" and {cout} is {int(total >= 2**w or total < 0)}." if p["carry_out"] and op != "addsub" else ".")
    )
    return Design(
        task_kind="adder",
        params=p,
        slug=f"{op}_w{w}{flags}",
        title=f"a {w}-bit {'adder-subtractor' if op == 'addsub' else op + 'er' if op == 'add' else 'subtractor'}",
        ports=tuple(ports),
        behaviour=tuple(spec),
        body=_adder_body(p, False),
        mutant_body=_adder_body(p, True),
        reasoning=(
            f"Putting {{{cout}, {res}}} on the left makes the expression {w + 1} bits wide, so the carry lands "
            f"in {cout} instead of being dropped."
            if p["carry_out"]
            else f"Only the low {bits_word(w)} are kept, so the natural wrap of a {w}-bit assignment is right.",
            "For the borrow, zero-extending both operands by one bit makes the MSB of the difference 1 exactly "
            "when the result went negative."
            if op == "sub" and p["carry_out"]
            else "Inverting b with b ^ {W{sub}} and adding sub as the carry-in gives the two's complement a - b."
            if op == "addsub"
            else "A single continuous assignment with + describes the ripple carry adder.",
            example,
        ),
        directed=(
            {"a": 2**w - 1, "b": 1, cin or "sub": 1},
            {"a": 0, "b": 2**w - 1, cin or "sub": 1},
            {"a": 0, "b": 0, cin or "sub": 0},
            {"a": 2**w - 1, "b": 2**w - 1, cin or "sub": 1},
        )
        if p["carry_in"] or op == "addsub"
        else ({"a": 2**w - 1, "b": 1}, {"a": 0, "b": 1}, {"a": 0, "b": 0}),
        random_cycles=100,
    )


OUTPUT_SETS = {"eq_lt_gt": ("eq", "lt", "gt"), "ge_le": ("ge", "le"), "eq_ne_lt_ge": ("eq", "ne", "lt", "ge")}
CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
CMP_WORDS = {
    "eq": "equal to",
    "ne": "not equal to",
    "lt": "less than",
    "le": "less than or equal to",
    "gt": "greater than",
    "ge": "greater than or equal to",
}
STRICTNESS_BUG = {"lt": "<=", "le": "<", "gt": ">=", "ge": ">"}


def _cmp_body(outs: tuple[str, ...], signed: bool, procedural: bool, bug: bool) -> str:
    a, b = ("$signed(a)", "$signed(b)") if signed else ("a", "b")
    first_order = next(o for o in outs if o in STRICTNESS_BUG)
    lines = []
    for o in outs:
        sym = STRICTNESS_BUG[o] if bug and o == first_order else CMP[o]
        lines.append(f"{o} = ({a} {sym} {b});")
    if procedural:
        return "    always @(*) begin\n" + "".join(f"        {x}\n" for x in lines) + "    end"
    return "\n".join(f"    assign {x}" for x in lines)


def _sample_cmp(rng: random.Random) -> Params:
    signed = rng.random() < 0.4
    return {"width": rng.randint(2 if signed else 1, 32), "signed": signed, "outputs": rng.choice(list(OUTPUT_SETS))}


def _build_cmp(p: Params, rng: random.Random) -> Design:
    w, signed, outs = p["width"], p["signed"], OUTPUT_SETS[p["outputs"]]
    procedural = rng.random() < 0.3
    kind = "signed two's complement" if signed else "unsigned"
    mx = 2**w - 1
    return Design(
        task_kind="comparator",
        params=p,
        slug=f"cmp{'s' if signed else 'u'}_w{w}_{p['outputs']}",
        title=f"a {w}-bit {'signed' if signed else 'unsigned'} magnitude comparator",
        ports=(Port("a", "input", w, doc="first operand"), Port("b", "input", w, doc="second operand"))
        + tuple(Port(o, "output", is_reg=procedural, doc=f"a {CMP_WORDS[o]} b") for o in outs),
        behaviour=(
            f"Compare the {w}-bit {kind} numbers a and b.",
            " ".join(f"{o} is 1 when a is {CMP_WORDS[o]} b." for o in outs),
        ),
        body=_cmp_body(outs, signed, procedural, False),
        mutant_body=_cmp_body(outs, signed, procedural, True),
        reasoning=(
            "Relational operators on plain vectors compare unsigned, so I wrap both operands in $signed() "
            f"to get two's complement ordering (for example {2 ** (w - 1)} as a {w}-bit signed value is "
            f"{-(2 ** (w - 1))})."
            if signed
            else "Ports are unsigned vectors, so the plain operators give the unsigned ordering directly.",
            "Each output is one relational expression, so there is no state and nothing to latch.",
            "Equal operands are the case that separates < from <=, so I keep the strictness of each output "
            "exactly as specified.",
        ),
        directed=(
            {"a": 0, "b": 0},
            {"a": mx, "b": mx},
            {"a": 1, "b": 0},
            {"a": 0, "b": 1},
            {"a": mx, "b": 0},
            {"a": 2 ** (w - 1), "b": 2 ** (w - 1) - 1},
            {"a": 5 % 2**w, "b": 5 % 2**w},
        ),
        stimulus={"b": "($random & 3) == 0 ? a : $random"},  # equal operands often: a still holds its old value
        random_cycles=120,
    )


ALU_OPS = {
    "add": ("a", "a + b", "a + b (modulo 2^W)"),
    "sub": ("s", "a - b", "a - b (modulo 2^W)"),
    "and": ("n", "a & b", "bitwise a AND b"),
    "or": ("o", "a | b", "bitwise a OR b"),
    "xor": ("x", "a ^ b", "bitwise a XOR b"),
    "nor": ("r", "~(a | b)", "bitwise NOR of a and b"),
    "shl": ("l", "a << b[{S}:0]", "a shifted left by b[{S}:0], filling with zeros"),
    "shr": ("h", "a >> b[{S}:0]", "a shifted right (logical) by b[{S}:0]"),
    "slt": ("t", "{{{{{W1}{{1'b0}}}}, (a < b)}}", "1 if a < b (unsigned), else 0"),
    "pass_b": ("b", "b", "b"),
    "not_a": ("i", "~a", "bitwise NOT of a"),
    "inc_a": ("c", "a + 1'b1", "a + 1 (modulo 2^W)"),
}


def _alu_expr(op: str, w: int, which: int) -> str:
    return ALU_OPS[op][which].format(S=clog2(w) - 1, W1=w - 1).replace("W", str(w))


def _alu_body(ops: list[str], w: int) -> str:
    ow = clog2(len(ops))
    lines = ["    always @(*) begin", "        case (op)"]
    lines += [f"            {lit(ow, i)}: result = {_alu_expr(o, w, 1)};" for i, o in enumerate(ops)]
    lines += ["        endcase", "    end", "", f"    assign zero = (result == {zeros(w)});"]
    return "\n".join(lines)


def _sample_alu(rng: random.Random) -> Params:
    return {"width": rng.choice([4, 8, 16, 32]), "ops": rng.sample(list(ALU_OPS), rng.choice([4, 8]))}


def _build_alu(p: Params, rng: random.Random) -> Design:
    w, ops = p["width"], p["ops"]
    ow = clog2(len(ops))
    table = "\n".join(f"  op = {i}: result = {_alu_expr(o, w, 2)}" for i, o in enumerate(ops))
    swapped = [ops[1], ops[0]] + ops[2:]
    a, b = rng.randrange(2**w), rng.randrange(2**w)
    return Design(
        task_kind="alu",
        params=p,
        slug=f"alu_w{w}_{''.join(ALU_OPS[o][0] for o in ops)}",
        title=f"a {w}-bit ALU with {len(ops)} operations",
        ports=(
            Port("a", "input", w, doc="first operand"),
            Port("b", "input", w, doc="second operand"),
            Port("op", "input", ow, doc="operation select"),
            Port("result", "output", w, is_reg=True, doc="operation result"),
            Port("zero", "output", doc="result is zero"),
        ),
        behaviour=(
            f"Implement a combinational ALU on the {w}-bit unsigned operands a and b. The {ow}-bit input op "
            "selects the operation:",
            table,
            f"The output zero is 1 when result is 0. result is {w} bits wide.",
        ),
        body=_alu_body(ops, w),
        mutant_body=_alu_body(swapped, w),
        reasoning=(
            f"{len(ops)} operations fit exactly in a {ow}-bit opcode, so the case statement covers every code "
            "and result is always assigned.",
            f"Shift amounts use b[{clog2(w) - 1}:0], enough for 0..{w - 1}."
            if {"shl", "shr"} & set(ops)
            else "No operation needs a shift amount.",
            f"With a = {a} and b = {b}, op 0 ({ops[0]}) gives "
            f"{_alu_ref(ops[0], a, b, w)}, and zero follows from comparing result with 0.",
        ),
        directed=tuple({"op": i, "a": a, "b": a} for i in range(len(ops))),
        random_cycles=160,
    )


def _alu_ref(op: str, a: int, b: int, w: int) -> int:
    """Python model of one ALU operation, used for the worked example in the reasoning."""
    m, s = 2**w - 1, b & (w - 1)
    table = {
        "add": a + b,
        "sub": a - b,
        "and": a & b,
        "or": a | b,
        "xor": a ^ b,
        "nor": ~(a | b),
        "shl": a << s,
        "shr": a >> s,
        "slt": int(a < b),
        "pass_b": b,
        "not_a": ~a,
        "inc_a": a + 1,
    }
    return table[op] & m


TASK_KINDS = (
    TaskKind("adder", "W-bit adder, subtractor or adder-subtractor with optional carries", _sample_adder, _build_adder),
    TaskKind("comparator", "signed/unsigned magnitude comparator", _sample_cmp, _build_cmp),
    TaskKind("alu", "4- or 8-operation ALU with zero flag", _sample_alu, _build_alu),
)
