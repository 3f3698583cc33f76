"""What a compiled step's optimized HLO says that XLA's analyses don't: the bytes its collectives move over the
interconnect, and the custom calls (Pallas kernels) whose work cost_analysis leaves out.

Read from `compiled.as_text()` (one SPMD program: every device runs it). A collective's per-device traffic is the
ring algorithm's, from its result shape and replica-group size g (the operands are printed without shapes):
all-reduce 2(g-1)/g·S, all-gather (g-1)/g·S, reduce-scatter (g-1)·S (its operand is g·S), all-to-all (g-1)/g·S,
collective-permute S when some device sends to another. Collectives in a while loop's body count its trip
count times (times the trips of the loops around it; `while_loops`); an unknown trip count counts once and is
reported (`uncounted_loops`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

PALLAS_TARGET = "tpu_custom_call"  # a Pallas (Mosaic) kernel on TPU: XLA's cost_analysis counts none of its work
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
DTYPE_BYTES = {
    "pred": 1,
    "s4": 0.5,
    "u4": 0.5,
    "s8": 1,
    "u8": 1,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
    "f8e4m3b11fnuz": 1,
    "bf16": 2,
    "f16": 2,
    "s16": 2,
    "u16": 2,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "f64": 8,
    "s64": 8,
    "u64": 8,
    "c64": 8,
    "c128": 16,
}
_OP = re.compile(r"^\s*(?:ROOT\s+)?%[\w.\-]+\s*=\s*(?P<shape>.*?)\s(?P<op>[a-z][\w\-]*)\((?P<rest>.*)$")
_ARRAY = re.compile(r"\b([a-z]\w*)\[([\d,]*)\]")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s.*\{\s*$")
_IOTA_GROUPS = re.compile(r"replica_groups=\[(\d+),(\d+)\]<=")
_LIST_GROUPS = re.compile(r"replica_groups=\{\{([\d,]*)\}")
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_PAIRS = re.compile(r"source_target_pairs=\{(\{[\d,{}]*\})\}")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_BODY = re.compile(r"body=%([\w.\-]+)")
_CONDITION = re.compile(r"condition=%([\w.\-]+)")
_NAME = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=")
_REF = re.compile(r"%([\w.\-]+)")
_INDEX = re.compile(r"get-tuple-element\(%[\w.\-]+\), index=(\d+)")
_CONSTANT = re.compile(r"\sconstant\((-?\d+)\)")
_SCOPE = re.compile(r'op_name="[^"]*\b(crosstune_attention_[a-z]+)')
_TARGET = re.compile(r'custom_call_target="([^"]+)"')


@dataclass
class Collectives:
    """Per-device traffic of one program's collectives, by kind: ops executed and bytes moved."""

    count: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, float] = field(default_factory=dict)
    custom_calls: dict[str, int] = field(default_factory=dict)  # "Pallas kernel name|crosstune scope" -> calls
    uncounted_loops: int = 0  # while loops with collectives and no known trip count (counted once)

    @property
    def total_bytes(self) -> float:
        return sum(self.bytes.values())

    def as_dict(self) -> dict:
        return {
            "count": self.count,
            "bytes": self.bytes,
            "custom_calls": self.custom_calls,
            "uncounted_loops": self.uncounted_loops,
        }


def _shape_arrays(shape_text: str) -> list[float]:
    """Bytes of every array in an HLO shape (a tuple lists several), layouts `{...}` ignored."""
    bare = re.sub(r"\{[^{}]*\}", "", shape_text)
    return [
        DTYPE_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
        for dtype, dims in _ARRAY.findall(bare)
        if dtype in DTYPE_BYTES
    ]


def group_size(line: str, devices: int) -> int:
    """Devices per replica group of a collective's line (all `devices` when it names none)."""
    if m := _IOTA_GROUPS.search(line):
        return int(m.group(2))
    if m := _LIST_GROUPS.search(line):
        return len([x for x in m.group(1).split(",") if x])
    if m := _MESH_GROUPS.search(line):
        sizes = dict(re.findall(r"'(\w+)'=(\d+)", m.group(1)))
        return math.prod(int(sizes[a]) for a in re.findall(r"'(\w+)'", m.group(2)))
    return devices


def _moved(kind: str, arrays: list[float], line: str, devices: int) -> float:
    if kind == "collective-permute":
        pairs = re.findall(r"\{(\d+),(\d+)\}", _PAIRS.search(line).group(1)) if _PAIRS.search(line) else []
        sends = any(a != b for a, b in pairs)
        return arrays[0] if arrays and sends else 0.0
    g = group_size(line, devices)
    if g <= 1:
        return 0.0
    size = sum(arrays)
    return {
        "all-reduce": 2 * (g - 1) / g,
        "all-gather": (g - 1) / g,
        "reduce-scatter": g - 1,
        "all-to-all": (g - 1) / g,
    }[kind] * size


def _kind(op: str) -> tuple[str | None, bool]:
    """(collective kind, is the async -start half) of an HLO opcode; (None, False) for anything else."""
    base = op.removesuffix("-start")
    return (base, op != base) if base in KINDS else (None, False)


def _kernel_key(line: str) -> str:
    """`kernel name|scope` of a Pallas custom call: its name from the backend_config (else the call target), and
    the innermost crosstune named scope in its op_name, which says which layer type called it."""
    scope = m.group(1) if (m := _SCOPE.search(line)) else ""
    return f"{_kernel_name(line)}|{scope}" if scope else _kernel_name(line)


def _kernel_name(line: str) -> str:
    """pallas_call names the instruction after its kernel (`%splash_mha_fwd_segmented_residuals.2 = ...`)."""
    m = re.match(r"^\s*(?:ROOT\s+)?%([\w\-]+?)(?:\.\d+)?\s*=", line)
    return m.group(1) if m else PALLAS_TARGET


def _instructions(hlo: str) -> list[str]:
    """The module's lines with each instruction joined into one (a kernel's metadata spans several lines)."""
    out: list[str] = []
    for line in hlo.splitlines():
        starts = _OP.match(line) or _COMPUTATION.match(line) or line.strip() in ("}", "") or not out
        if starts or line.startswith("HloModule"):
            out.append(line)
        else:
            out[-1] += " " + line.strip()
    return out


@dataclass(frozen=True)
class Loop:
    """A while loop of the module: its body and condition computations, the computation holding it, and how many
    times its body runs each time the loop is reached (None: not known from the HLO)."""

    body: str
    condition: str
    parent: str
    trip: int | None


def _computations(hlo: str) -> dict[str, list[str]]:
    """Each computation's instructions, one line each, by name (the module's header and metadata under "")."""
    out: dict[str, list[str]] = {"": []}
    current = ""
    for line in _instructions(hlo):
        if (m := _COMPUTATION.match(line)) and " = " not in line:
            current = m.group(1)
            out[current] = []
        elif _OP.match(line):
            out[current].append(line)
    return out


def _operands(line: str) -> list[str]:
    """The names an instruction's line reads, in order (its operand list, comments like /*index=5*/ left out)."""
    inside = re.sub(r"/\*.*?\*/", "", _OP.match(line).group("rest")).split(")", 1)[0]
    return _REF.findall(inside)


def _counted_trip(condition: list[str], init: str, body: list[str], defs: dict[str, str]) -> int | None:
    """The trip count of a loop that counts one tuple element from a constant by a constant step while it is below
    a constant (jax's scan and fori_loop: `i < n`, i from 0 by 1), read from its condition, its initial tuple and
    its body (copies of a value seen through); None for any other loop. XLA:TPU's optimized HLO prints no
    known_trip_count (libtpu 0.0.42)."""
    test = _root(condition)
    if " compare(" not in test or "direction=LT" not in test:
        return None
    counter, limit = _operands(test)[:2]
    index, end = _INDEX.search(_source(defs, counter)), _constant(defs, limit)
    if index is None or end is None or " tuple(" not in defs.get(init, ""):
        return None
    k, first, after = int(index.group(1)), _operands(defs[init]), _root(body)
    following = _operands(after) if " tuple(" in after else []
    if k >= min(len(first), len(following)):
        return None
    start, increment = _constant(defs, first[k]), _source(defs, following[k])
    if start is None or " add(" not in increment:
        return None
    x, y = _operands(increment)[:2]
    for own, other in ((x, y), (y, x)):
        same, step = _INDEX.search(_source(defs, own)), _constant(defs, other)
        if same and int(same.group(1)) == k and step is not None and step > 0:
            return max(0, math.ceil((end - start) / step))
    return None


def _root(lines: list[str]) -> str:
    return next((line for line in lines if line.lstrip().startswith("ROOT")), "")


def _source(defs: dict[str, str], name: str) -> str:
    """The line that makes the value `name` holds, through copies of it."""
    line = defs.get(name, "")
    while " copy(" in line:
        line = defs.get(_operands(line)[0], "")
    return line


def _constant(defs: dict[str, str], name: str) -> int | None:
    """The integer a scalar constant holds (through copies), else None."""
    m = _CONSTANT.search(_source(defs, name))
    return int(m.group(1)) if m else None


def while_loops(hlo: str) -> list[Loop]:
    """The module's while loops, each with its trip count: XLA's known_trip_count where the HLO prints one, else
    counted from the loop's condition (`_counted_trip`)."""
    return _loops(_computations(hlo))


def _loops(comps: dict[str, list[str]]) -> list[Loop]:
    defs = {m.group(1): line for lines in comps.values() for line in lines if (m := _NAME.match(line))}
    out = []
    for parent, lines in comps.items():
        for line in lines:
            if _OP.match(line).group("op") != "while" or not (body := _BODY.search(line)):
                continue
            cond = c.group(1) if (c := _CONDITION.search(line)) else ""
            if known := _TRIP.search(line):
                trip = int(known.group(1))
            else:
                init = (_operands(line) or [""])[0]
                trip = _counted_trip(comps.get(cond, []), init, comps.get(body.group(1), []), defs)
            out.append(Loop(body.group(1), cond, parent, trip))
    return out


def times_run(loops: list[Loop]) -> dict[str, int]:
    """How many times each loop body runs per run of the module: its trip count times those of the loops around it
    (an unknown trip count: once). Computations that are no loop's body run once."""
    by_body = {loop.body: loop for loop in loops}

    def runs(name: str) -> int:
        loop = by_body.get(name)
        return 1 if loop is None else (1 if loop.trip is None else loop.trip) * runs(loop.parent)

    return {loop.body: runs(loop.body) for loop in loops}


def parse_collectives(hlo: str, devices: int) -> Collectives:
    """The collectives and custom calls of an optimized HLO module (`compiled.as_text()`), per device."""
    per_comp: dict[str, list[tuple[str, float]]] = {}
    calls: dict[str, dict[str, int]] = {}
    comps = _computations(hlo)
    for current, lines in comps.items():
        for line in lines:
            op = _OP.match(line)
            name = op.group("op")
            if name == "custom-call":
                if (t := _TARGET.search(line)) and t.group(1) == PALLAS_TARGET:
                    kernel = _kernel_key(line)
                    calls.setdefault(current, {})
                    calls[current][kernel] = calls[current].get(kernel, 0) + 1
                continue
            kind, started = _kind(name)
            if kind is None:
                continue
            arrays = _shape_arrays(op.group("shape"))
            if started and kind in ("all-gather", "collective-permute") and len(arrays) >= 2:
                arrays = [arrays[1]] if kind == "collective-permute" else arrays[len(arrays) // 2 :]
            per_comp.setdefault(current, []).append((kind, _moved(kind, arrays, line, devices)))
    loops = _loops(comps)
    times = times_run(loops)
    out = Collectives()
    out.uncounted_loops = sum(1 for loop in loops if loop.trip is None and loop.body in per_comp)
    for comp, ops in per_comp.items():
        for kind, moved in ops:
            out.count[kind] = out.count.get(kind, 0) + times.get(comp, 1)
            out.bytes[kind] = out.bytes.get(kind, 0.0) + moved * times.get(comp, 1)
    for comp, kernels in calls.items():
        for kernel, n in kernels.items():
            out.custom_calls[kernel] = out.custom_calls.get(kernel, 0) + n * times.get(comp, 1)
    return out
