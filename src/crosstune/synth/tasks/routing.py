"""Selection and encoding task kinds: multiplexers, decoders, priority encoders."""

from __future__ import annotations

import random

from crosstune.synth.design import Design, Params, Port, TaskKind, bits_word, clog2, lit, ones, zeros

MUX_WIDTHS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32)


def _mux_body(n: int, w: int, unused: str, style: str, order: list[int]) -> str:
    sw = clog2(n)
    fill = ones(w) if unused == "ones" else zeros(w)
    if style == "ternary" and n == 2:
        return f"    assign out = sel ? in{order[1]} : in{order[0]};"
    if style == "ternary":
        expr = fill if n < 2**sw else f"in{order[n - 1]}"
        last = n - 1 if n < 2**sw else n - 2
        for i in range(last, -1, -1):
            expr = f"(sel == {lit(sw, i)}) ? in{order[i]} :\n                 {expr}"
        return f"    assign out = {expr};"
    lines = ["    always @(*) begin", "        case (sel)"]
    lines += [f"            {lit(sw, i)}: out = in{order[i]};" for i in range(n)]
    if n < 2**sw:
        lines.append(f"            default: out = {fill};")
    return "\n".join(lines + ["        endcase", "    end"])


def _sample_mux(rng: random.Random) -> Params:
    n = rng.randint(2, 8)
    unused = "none" if n & (n - 1) == 0 else rng.choice(["zero", "ones"])
    return {"n_ways": n, "width": rng.choice(MUX_WIDTHS), "unused": unused}


def _build_mux(p: Params, rng: random.Random) -> Design:
    n, w, unused = p["n_ways"], p["width"], p["unused"]
    sw = clog2(n)
    style = rng.choice(["case", "ternary"])
    order = list(range(n))
    swapped = [1, 0] + order[2:]
    spec = [
        f"Implement a {n}-to-1 multiplexer: out is the data input whose number equals sel (in0 when sel "
        f"is 0, in1 when sel is 1, and so on up to in{n - 1})."
    ]
    if unused != "none":
        value = "all ones" if unused == "ones" else "all zeros"
        spec.append(f"For the unused select values ({n} to {2**sw - 1}), set out to {value}.")
    fill_note = (
        f"{2**sw - n} select codes are unused and must drive {'all ones' if unused == 'ones' else 'zero'}"
        if unused != "none"
        else "every select code is used, so there is no leftover case"
    )
    vec = f"{w}-bit " if w > 1 else ""
    return Design(
        task_kind="mux",
        params=p,
        slug=f"mux{n}to1_w{w}" + ("" if unused == "none" else f"_{unused}"),
        title=f"a {vec}{n}-to-1 multiplexer",
        ports=(Port("sel", "input", sw, doc="select signal"),)
        + tuple(Port(f"in{i}", "input", w, doc=f"data input {i}") for i in range(n))
        + (Port("out", "output", w, is_reg=style == "case", doc="selected data"),),
        behaviour=tuple(spec) + (f"All data inputs and out are {bits_word(w)} wide.",),
        body=_mux_body(n, w, unused, style, order),
        mutant_body=_mux_body(n, w, unused, style, swapped),
        reasoning=(
            f"sel has to address {n} inputs, so it needs clog2({n}) = {sw} bit{'s' if sw > 1 else ''}; {fill_note}.",
            "A case statement inside always @(*) with every path assigning out keeps this purely combinational."
            if style == "case"
            else "A chain of conditional operators compares sel against "
            "each code in turn; the last arm is the fall-through value.",
            f"The data path is {bits_word(w)} wide everywhere, so no extension or truncation happens.",
        ),
        directed=tuple({"sel": s, **{f"in{i}": rng.randrange(2**w) for i in range(n)}} for s in range(2**sw)),
        random_cycles=100,
    )


def _decoder_body(n: int, enable: str, active_low: bool, reverse: bool) -> str:
    m = 2**n
    shifted = f"({lit(m, 1 << (m - 1))} >> in)" if reverse else f"({lit(m, 1)} << in)"
    if enable != "none":
        on = "en" if enable == "high" else "!en"
        shifted = f"{on} ? {shifted} : {zeros(m)}"
    return f"    assign out = ~({shifted});" if active_low else f"    assign out = {shifted};"


def _sample_decoder(rng: random.Random) -> Params:
    return {
        "n_in": rng.randint(1, 5),
        "enable": rng.choice(["none", "high", "low"]),
        "active_low": rng.random() < 0.35,
    }


def _build_decoder(p: Params, rng: random.Random) -> Design:
    n, enable, low = p["n_in"], p["enable"], p["active_low"]
    m = 2**n
    on, off = ("0", "1") if low else ("1", "0")
    spec = [f"Implement a {n}-to-{m} decoder: out[k] is {on} when in equals k and {off} otherwise."]
    ports = [Port("in", "input", n, doc="binary code")]
    if enable != "none":
        level = "1" if enable == "high" else "0"
        spec.append(f"The decoder is enabled when en is {level}; while disabled every bit of out is {off}.")
        ports.append(Port("en", "input", doc=f"enable (active {'high' if enable == 'high' else 'low'})"))
    ports.append(Port("out", "output", m, doc=f"{'active-low ' if low else ''}one-hot outputs"))
    suffix = {"none": "", "high": "_en", "low": "_enn"}[enable] + ("_n" if low else "")
    return Design(
        task_kind="decoder",
        params=p,
        slug=f"dec{n}to{m}{suffix}",
        title=f"a {n}-to-{m} {'active-low ' if low else ''}decoder" + (" with enable" if enable != "none" else ""),
        ports=tuple(ports),
        behaviour=tuple(spec) + (f"out is {m} bits wide and in is {bits_word(n)} wide.",),
        body=_decoder_body(n, enable, low, False),
        mutant_body=_decoder_body(n, enable, low, True),
        reasoning=(
            f"{n} input bits select one of {m} lines, so out is [{m - 1}:0].",
            f"Shifting a {m}-bit constant 1 left by in sets exactly bit in; I size the constant as {m} bits "
            "so the shift cannot lose the bit.",
            ("With an enable, a conditional picks the one-hot value or all zeros. " if enable != "none" else "")
            + ("Inverting the whole vector at the end gives the active-low version." if low else ""),
        ),
        directed=tuple({"in": k, "en": v} for k in range(m) for v in (0, 1))
        if enable != "none"
        else tuple({"in": k} for k in range(m)),
        random_cycles=40,
    )


def _prienc_body(w: int, prio: str, style: str) -> str:
    pw = clog2(w)
    if style == "casez":
        lines = ["    always @(*) begin", "        valid = 1'b1;", "        casez (in)"]
        for k in range(w):
            i = w - 1 - k if prio == "msb" else k
            pattern = ("0" * k + "1" + "?" * (w - 1 - k)) if prio == "msb" else ("?" * (w - 1 - k) + "1" + "0" * k)
            lines.append(f"            {w}'b{pattern}: pos = {lit(pw, i)};")
        lines += [f"            default: begin pos = {zeros(pw)}; valid = 1'b0; end", "        endcase", "    end"]
        return "\n".join(lines)
    loop = f"i = 0; i < {w}; i = i + 1" if prio == "msb" else f"i = {w - 1}; i >= 0; i = i - 1"
    return (
        "    integer i;\n\n    always @(*) begin\n"
        f"        pos = {zeros(pw)};\n        valid = 1'b0;\n"
        f"        for ({loop}) begin\n"
        "            if (in[i]) begin\n"
        f"                pos = i[{pw - 1}:0];\n                valid = 1'b1;\n"
        "            end\n        end\n    end"
    )


def _sample_prienc(rng: random.Random) -> Params:
    return {"width": rng.randint(2, 16), "priority": rng.choice(["msb", "lsb"])}


def _build_prienc(p: Params, rng: random.Random) -> Design:
    w, prio = p["width"], p["priority"]
    pw = clog2(w)
    style = "casez" if w <= 8 and rng.random() < 0.6 else "loop"
    which = "most significant (highest-numbered)" if prio == "msb" else "least significant (lowest-numbered)"
    how = (
        "a casez with ? wildcards lists the patterns from the highest-priority bit down, and casez takes the "
        "first match"
        if style == "casez"
        else "a for loop that visits the bits in increasing priority order; the last bit that is set wins"
    )
    return Design(
        task_kind="priority_encoder",
        params=p,
        slug=f"prienc{w}_{prio}",
        title=f"a {w}-bit priority encoder ({prio.upper()} first)",
        ports=(
            Port("in", "input", w, doc="request bits"),
            Port("pos", "output", pw, is_reg=True, doc="index of the winning bit"),
            Port("valid", "output", is_reg=True, doc="any bit set"),
        ),
        behaviour=(
            f"Build a priority encoder for the {w}-bit input in. The output pos is the index of the {which} bit "
            "of in that is 1, and valid is 1 when at least one bit of in is 1.",
            f"When in is zero, output pos = 0 and valid = 0. pos is {bits_word(pw)} wide.",
        ),
        body=_prienc_body(w, prio, style),
        mutant_body=_prienc_body(w, "lsb" if prio == "msb" else "msb", style),
        reasoning=(
            f"Indexes 0..{w - 1} need clog2({w}) = {pw} bits for pos.",
            f"I will use {how}.",
            "Defaults at the top of the block (pos = 0, valid = 0 for the all-zero input) mean every path "
            "assigns both outputs, so no latch is inferred.",
        ),
        directed=({"in": 0}, {"in": (1 << w) - 1}) + tuple({"in": 1 << k} for k in range(w)),
        stimulus={"in": "$random & $random"},  # sparser inputs so low-priority bits win often too
        random_cycles=100,
    )


TASK_KINDS = (
    TaskKind("mux", "2..8-way multiplexer, width 1..32, defined unused selects", _sample_mux, _build_mux),
    TaskKind(
        "decoder", "n-to-2^n decoder with optional enable and active-low outputs", _sample_decoder, _build_decoder
    ),
    TaskKind("priority_encoder", "MSB- or LSB-first priority encoder with valid", _sample_prienc, _build_prienc),
)
