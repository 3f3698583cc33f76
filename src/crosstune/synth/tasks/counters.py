"""Counting task kinds: modulo up/down counters and clock dividers."""

from __future__ import annotations

import random

from crosstune.synth.design import (
    POSEDGE_SENTENCE,
    Design,
    Params,
    Port,
    TaskKind,
    bits_word,
    clog2,
    lit,
    reset_from,
    reset_port,
    reset_sentence,
    reset_stimulus,
    reset_suffix,
    sample_reset,
    seq_always,
    vrange,
)


def _counter_body(p: Params, bug: bool) -> str:
    m, d = p["modulus"], p["direction"]
    w = clog2(m)
    rst = reset_from(p)
    # The bug wraps one count early (or, for modulo 2, resets to the wrong value).
    top = m - 2 if bug and m >= 3 else m - 1
    init = m - 1 if d == "down" else 0
    if bug and m == 2:
        init = 1 - init
    up = f"q <= (q == {lit(w, top)}) ? {lit(w, 0)} : q + 1'b1;"
    down = f"q <= (q == {lit(w, 0)}) ? {lit(w, top)} : q - 1'b1;"
    step = {"up": [up], "down": [down], "updown": ["if (up)", f"    {up}", "else", f"    {down}"]}[d]
    if p["enable"]:
        step = ["else if (ena) begin"] + [f"    {s}" for s in step] + ["end"]
    else:
        step = ["else begin"] + [f"    {s}" for s in step] + ["end"]
    lines = [f"    {seq_always('clk', rst)} begin", f"        if ({rst.asserted})", f"            q <= {lit(w, init)};"]
    lines += [f"        {s}" for s in step]
    return "\n".join(lines + ["    end"])


def _sample_counter(rng: random.Random) -> Params:
    return {
        "modulus": rng.randint(2, 64),
        "direction": rng.choice(["up", "up", "down", "updown"]),
        "enable": rng.random() < 0.5,
        **sample_reset(rng),
    }


def _build_counter(p: Params, rng: random.Random) -> Design:
    m, d, ena = p["modulus"], p["direction"], p["enable"]
    w = clog2(m)
    rst = reset_from(p)
    ports = [Port("clk", "input", doc="clock"), reset_port(rst)]
    if ena:
        ports.append(Port("ena", "input", doc="count enable"))
    if d == "updown":
        ports.append(Port("up", "input", doc="1 counts up, 0 counts down"))
    ports.append(Port("q", "output", w, is_reg=True, doc="count value"))
    motion = {
        "up": f"counts up from 0 to {m - 1} and then wraps back to 0",
        "down": f"counts down from {m - 1} to 0 and then wraps back to {m - 1}",
        "updown": f"counts up (when up is 1) or down (when up is 0) through 0..{m - 1}, wrapping from {m - 1} "
        f"to 0 when counting up and from 0 to {m - 1} when counting down",
    }[d]
    init = m - 1 if d == "down" else 0
    spec = [
        f"Build a modulo-{m} counter that {motion}.",
        (
            "The counter only changes on a clock edge when ena is 1; when ena is 0 it holds its value."
            if ena
            else "The counter advances on every clock cycle."
        ),
        reset_sentence(rst, f"reset the counter to {init}"),
        f"q is {bits_word(w)} wide.",
        POSEDGE_SENTENCE,
    ]
    burst = [{"ena": 1, "up": 1}] * (m + 2) + ([{"ena": 1, "up": 0}] * (m + 2) if d == "updown" else [])
    directed = tuple(
        {k: v for k, v in vec.items() if (k != "ena" or ena) and (k != "up" or d == "updown")} for vec in burst
    )
    kind = "asynchronous" if rst.asynchronous else "synchronous"
    return Design(
        task_kind="counter",
        params=p,
        slug=f"count{d}_mod{m}" + ("_en" if ena else "") + reset_suffix(p),
        title=f"a modulo-{m} {'up/down' if d == 'updown' else d} counter" + (" with enable" if ena else ""),
        ports=tuple(ports),
        behaviour=tuple(spec),
        body=_counter_body(p, False),
        mutant_body=_counter_body(p, True),
        reasoning=(
            f"Values 0..{m - 1} need clog2({m}) = {bits_word(w)}"
            + (
                "; the modulus is a power of two, so the wrap would happen anyway, but comparing against "
                f"{m - 1} makes it explicit."
                if m == 2**w
                else f"; a plain {w}-bit count would run on to {2**w - 1}, so I compare against {m - 1} to wrap "
                "at the right place."
            ),
            f"The reset is {kind}, so it "
            + (
                "goes into the sensitivity list with the clock edge."
                if rst.asynchronous
                else "is checked first inside the clocked block, only at the rising edge."
            ),
            "The terminal value comparison picks between the wrap value and the +1/-1 step, so each branch "
            "assigns q exactly once with a non-blocking assignment.",
        ),
        clock="clk",
        reset=rst,
        directed=directed,
        stimulus={
            rst.name: reset_stimulus(rst, 32),
            "ena": "($random & 3) != 0",
            "up": "(($random & 15) == 0) ? !up : up",  # long runs in one direction so the wrap is reached
        },
        quiet_cycles=2 * m + 20,
        random_cycles=250,
    )


def _divider_body(p: Params, bug: bool) -> str:
    n, kind = p["divisor"], p["output"]
    rst = reset_from(p)
    period = n if kind == "tick" else n // 2
    w = clog2(period)
    top = period - 2 if bug and period >= 3 else period - 1
    head = [f"    reg {vrange(w)}count;", "", f"    {seq_always('clk', rst)} begin"]
    if kind == "tick":
        lines = head + [
            f"        if ({rst.asserted})",
            f"            count <= {lit(w, 0)};",
            f"        else if (count == {lit(w, top)})",
            f"            count <= {lit(w, 0)};",
            "        else",
            "            count <= count + 1'b1;",
            "    end",
            "",
            f"    assign tick = (count == {lit(w, 0 if bug and n == 2 else top)});",
        ]
        return "\n".join(lines)
    init = "1'b1" if bug and period < 3 else "1'b0"
    lines = head + [
        f"        if ({rst.asserted}) begin",
        f"            count <= {lit(w, 0)};",
        f"            clk_out <= {init};",
        f"        end else if (count == {lit(w, top)}) begin",
        f"            count <= {lit(w, 0)};",
        "            clk_out <= ~clk_out;",
        "        end else begin",
        "            count <= count + 1'b1;",
        "        end",
        "    end",
    ]
    return "\n".join(lines)


def _sample_divider(rng: random.Random) -> Params:
    kind = rng.choice(["tick", "square"])
    n = rng.randint(2, 32) if kind == "tick" else 2 * rng.randint(1, 16)
    return {"divisor": n, "output": kind, **sample_reset(rng)}


def _build_divider(p: Params, rng: random.Random) -> Design:
    n, kind = p["divisor"], p["output"]
    rst = reset_from(p)
    if kind == "tick":
        out = Port("tick", "output", doc=f"one-cycle pulse every {n} cycles")
        spec = (
            f"Build a clock divider that produces a one-cycle pulse on tick every {n} clock cycles. Internally "
            f"a counter resets to 0 and increments on every clock edge, wrapping from {n - 1} back to 0; tick "
            f"is 1 exactly while that counter is {n - 1}.",
            reset_sentence(rst, "reset the internal counter to 0"),
        )
        think = (
            f"A counter of clog2({n}) = {bits_word(clog2(n))} counts 0..{n - 1}; decoding its last value gives a "
            f"pulse that is high for 1 cycle out of {n}.",
            "tick is a combinational decode of the registered count, so it is glitch-free relative to the "
            "clock edge and needs no extra register.",
        )
    else:
        half = n // 2
        out = Port("clk_out", "output", is_reg=True, doc=f"clock divided by {n}")
        spec = (
            f"Build a divide-by-{n} clock divider with a 50% duty cycle output clk_out. After reset clk_out is "
            f"0 for {half} clock cycle{'s' if half > 1 else ''}, then 1 for {half}, and so on: it toggles "
            f"every {half} cycle{'s' if half > 1 else ''}.",
            reset_sentence(rst, "set clk_out to 0 and restart the count"),
        )
        think = (
            f"A period of {n} cycles with 50% duty means toggling clk_out every {half} cycles, so the counter "
            f"runs 0..{half - 1} and needs {bits_word(clog2(half))}.",
            "Both count and clk_out live in the same clocked block so they reset together.",
        )
    return Design(
        task_kind="clock_divider",
        params=p,
        slug=f"clkdiv{n}_{kind}" + reset_suffix(p),
        title=f"a divide-by-{n} clock divider ({'pulse' if kind == 'tick' else 'square wave'} output)",
        ports=(Port("clk", "input", doc="clock"), reset_port(rst), out),
        behaviour=spec + (POSEDGE_SENTENCE,),
        body=_divider_body(p, False),
        mutant_body=_divider_body(p, True),
        reasoning=think
        + (
            "The reset is "
            + (
                "asynchronous, so it is in the sensitivity list."
                if rst.asynchronous
                else "synchronous, so it is tested first inside the clocked block."
            ),
        ),
        clock="clk",
        reset=rst,
        stimulus={rst.name: reset_stimulus(rst, 64)},
        quiet_cycles=3 * n + 10,
        random_cycles=200,
    )


TASK_KINDS = (
    TaskKind(
        "counter",
        "modulo-M up/down/up-down counter, optional enable, sync/async reset",
        _sample_counter,
        _build_counter,
    ),
    TaskKind("clock_divider", "divide-by-N pulse or 50% duty square wave", _sample_divider, _build_divider),
)
