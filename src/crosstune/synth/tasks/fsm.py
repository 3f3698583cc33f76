"""Finite state machines: serial bit-sequence detectors (Moore or Mealy, overlapping or not)."""

from __future__ import annotations

import random

from crosstune.synth.design import (
    POSEDGE_SENTENCE,
    Design,
    Params,
    Port,
    TaskKind,
    clog2,
    lit,
    reset_from,
    reset_port,
    reset_sentence,
    reset_stimulus,
    reset_suffix,
    sample_reset,
    seq_always,
)

Table = list[tuple[int, int]]  # per state: (next state on in=0, next state on in=1)


def _advance(seen: str, pattern: str, limit: int) -> int:
    """Length of the longest prefix of `pattern` (at most `limit`) that is a suffix of `seen`."""
    for k in range(min(limit, len(seen)), 0, -1):
        if seen.endswith(pattern[:k]):
            return k
    return 0


def transitions(pattern: str, moore: bool, overlap: bool, naive: bool = False) -> Table:
    """Next-state table. State k means the last k bits seen equal the first k bits of the pattern.

    `naive` models the classic bug of falling back to the idle state on every mismatch."""
    n = len(pattern)
    states = n + 1 if moore else n
    table = []
    for s in range(states):
        row = []
        for bit in "01":
            full = s == n  # Moore only: the whole pattern was just seen
            seen = "" if full and not overlap else pattern[:s]
            limit = n if moore else n - 1
            nxt = _advance(seen + bit, pattern, limit)
            if not moore and not overlap and s == n - 1 and bit == pattern[-1]:
                nxt = 0
            if naive and not full and bit != pattern[s % n] and nxt != 0:
                nxt = 0
            row.append(nxt)
        table.append((row[0], row[1]))
    return table


def _body(p: Params, table: Table, detect_state: int) -> str:
    pattern, moore = p["pattern"], p["machine"] == "moore"
    rst = reset_from(p)
    sw = clog2(len(table))
    names = ", ".join(f"S{k} = {lit(sw, k)}" for k in range(len(table)))
    lines = [
        f"    localparam [{sw - 1}:0] {names};",
        "",
        f"    reg [{sw - 1}:0] state, next_state;",
        "",
        "    always @(*) begin",
        "        case (state)",
    ]
    lines += [f"            S{k}: next_state = in ? S{one} : S{zero};" for k, (zero, one) in enumerate(table)]
    if len(table) < 2**sw:
        lines.append("            default: next_state = S0;")
    lines += [
        "        endcase",
        "    end",
        "",
        f"    {seq_always('clk', rst)} begin",
        f"        if ({rst.asserted})",
        "            state <= S0;",
        "        else",
        "            state <= next_state;",
        "    end",
        "",
    ]
    if moore:
        lines.append(f"    assign detected = (state == S{detect_state});")
    else:
        lines.append(f"    assign detected = (state == S{detect_state}) && (in == 1'b{pattern[-1]});")
    return "\n".join(lines)


def _mutant(p: Params) -> str:
    """The first plausible bug that really changes the machine: naive fallback, wrong overlap, early output."""
    pattern, moore, overlap = p["pattern"], p["machine"] == "moore", p["overlap"]
    good = transitions(pattern, moore, overlap)
    final = len(pattern) if moore else len(pattern) - 1
    for table in (transitions(pattern, moore, overlap, naive=True), transitions(pattern, moore, not overlap)):
        if table != good:
            return _body(p, table, final)
    return _body(p, good, final - 1)


def _stream(pattern: str) -> str:
    """Directed input bits: repeats, restarts after every partial match, and self-overlapping runs."""
    bits = pattern * 3
    for k in range(1, len(pattern)):
        bits += pattern[:k] + pattern
    border = _advance(pattern, pattern, len(pattern) - 1)
    return bits + pattern + pattern[border:] * 2


def _sample(rng: random.Random) -> Params:
    n = rng.randint(3, 6)
    return {
        "pattern": format(rng.randrange(2**n), f"0{n}b"),
        "machine": rng.choice(["moore", "mealy"]),
        "overlap": rng.random() < 0.6,
        **sample_reset(rng),
    }


def _build(p: Params, rng: random.Random) -> Design:
    pattern, moore, overlap = p["pattern"], p["machine"] == "moore", p["overlap"]
    n = len(pattern)
    rst = reset_from(p)
    table = transitions(pattern, moore, overlap)
    final = n if moore else n - 1
    timing = (
        "It is a Moore machine: detected depends only on the state and is 1 for one clock cycle, the cycle "
        "after the rising edge that samples the last bit of the sequence."
        if moore
        else "It is a Mealy machine: detected is 1 during the cycle in which all earlier bits of the sequence "
        "have been sampled and in currently holds the last bit, so detected depends combinationally on in."
    )
    overlap_text = (
        "Overlapping occurrences are detected: the tail of one occurrence may be the start of the next."
        if overlap
        else "Occurrences do not overlap: after a detection, matching starts again from scratch with the next bit."
    )
    meaning = "; ".join(f"S{k} = '{pattern[:k]}'" if k else "S0 = nothing matched" for k in range(len(table)))
    rows = ", ".join(f"S{k}->(0:S{z}, 1:S{o})" for k, (z, o) in enumerate(table))
    return Design(
        task_kind="sequence_detector",
        params=p,
        slug=f"seqdet_{pattern}_{p['machine']}" + ("_ovl" if overlap else "") + reset_suffix(p),
        title=f"a {'Moore' if moore else 'Mealy'} FSM that detects the bit sequence {pattern}",
        ports=(
            Port("clk", "input", doc="clock"),
            reset_port(rst),
            Port("in", "input", doc="serial input bit"),
            Port("detected", "output", doc="sequence seen"),
        ),
        behaviour=(
            f"Build a finite state machine that detects the bit sequence {pattern} on the serial input in "
            f"(the leftmost bit arrives first). One bit of in is sampled on every rising clock edge.",
            timing,
            overlap_text,
            reset_sentence(rst, "return the machine to its initial state, in which no bits have been matched"),
            POSEDGE_SENTENCE,
        ),
        body=_body(p, table, final),
        mutant_body=_mutant(p),
        reasoning=(
            f"I track how much of {pattern} has been matched so far. States: {meaning}.",
            "On a wrong bit the machine must not simply return to S0: it falls back to the longest prefix of "
            "the sequence that is still a suffix of the bits seen.",
            f"That gives the transitions {rows}.",
            f"{len(table)} states fit in {clog2(len(table))} bits; the output is decoded "
            + ("from the state alone." if moore else f"from state S{final} together with in."),
        ),
        clock="clk",
        reset=rst,
        directed=tuple({"in": int(b)} for b in _stream(pattern)),
        stimulus={rst.name: reset_stimulus(rst, 64), "in": "$random"},
        quiet_cycles=60,
        random_cycles=250,
    )


TASK_KINDS = (TaskKind("sequence_detector", "Moore/Mealy FSM detecting a 3-6 bit pattern", _sample, _build),)
