"""The work of a step's while loops that XLA's cost_analysis leaves out: it counts a loop's body once, however many
times the loop runs. Under jax 0.10.2, for XLA:CPU and XLA:TPU alike (libtpu 0.0.42), a lax.scan of 8 matmuls costs
1/8 of the same matmuls unrolled; neither the compiled executable nor jaxlib gives a figure per computation.

So each loop's body is cut out of the optimized HLO as a module of its own (the module's computations, the body
as its entry) and costed by XLA's own analysis (`cost`: crosstune.train.jax.aot passes jaxlib's
hlo_module_cost_analysis, by the CPU client: the compile-only TPU client has none; on a v5e program it gives the
TPU's own flops and bytes within 0.1 %). What cost_analysis missed is each body's (trip count − 1) more runs,
times the runs of the loops around it (crosstune.planner.hlo.times_run). XLA counts a Pallas kernel's work as
unknown in both (−1 per call): crosstune.planner.hlo counts those calls, trip counts included, and the model
their work (CompiledStep.kernel_flops). A loop's condition runs once more than its body: one compare, left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from crosstune.planner.hlo import times_run, while_loops

Cost = Callable[[str], tuple[float, float]]  # an HLO module's text -> (flops, bytes accessed), XLA's cost analysis

_HEADER = re.compile(r"^HloModule\s+([\w.\-]+)[^\n]*", re.MULTILINE)
_START = re.compile(r"^(ENTRY\s+)?%([\w.\-]+)\s.*\{\s*$")
_REF = re.compile(r"%([\w.\-]+)")  # a name an instruction or computation refers to


@dataclass(frozen=True)
class LoopWork:
    """Flops and bytes accessed per device that XLA's cost_analysis of the module leaves out of its loops."""

    flops: float
    bytes: float
    uncounted: int  # loops with work whose trip count the HLO does not give: counted once, as cost_analysis does


def body_module(hlo: str, body: str) -> str:
    """The module's text with `body` as its entry computation and only the computations it reaches (what it calls,
    what those call, in the module's order: callees before callers), and a header without the old entry's layout.
    Each loop's module is parsed on its own: with the whole module kept, Gemma 3 27B's step on v6e-8 (46 loops) took
    30.7 s to cost here, 4.2 s so (the same flops and bytes)."""
    header: list[str] = []
    blocks: dict[str, list[str]] = {}  # the computations but the entry, in order, each whole
    current: list[str] | None = None
    for line in hlo.splitlines():
        if m := _START.match(line):
            current = [] if m.group(1) else blocks.setdefault(m.group(2), [])
        if current is None:
            header.append(line)
            continue
        current.append(line)
        if line == "}":
            current = None
    keep, todo = set(), [body]
    while todo:
        name = todo.pop()
        if name in blocks and name not in keep:
            keep.add(name)
            todo += (r for r in _REF.findall("\n".join(blocks[name])) if r in blocks and r not in keep)
    out = [line for line in header if line.strip()]
    for name, lines in blocks.items():
        if name in keep:
            out += ["", "ENTRY " + lines[0] if name == body else lines[0], *lines[1:]]
    return _HEADER.sub(lambda m: f"HloModule {m.group(1)}_loop_body", "\n".join(out), count=1)


def loop_work(hlo: str, cost: Cost) -> LoopWork:
    """What the loops of the optimized module `hlo` (`compiled.as_text()`) do beyond their first run, by `cost`."""
    loops = while_loops(hlo)
    runs = times_run(loops)
    flops = moved = 0.0
    uncounted = 0
    for loop in loops:
        f, b = cost(body_module(hlo, loop.body))
        if loop.trip is None:
            uncounted += f > 0 or b > 0
            continue
        around = runs.get(loop.parent, 1)  # the runs of the loops around it
        flops += around * (loop.trip - 1) * f
        moved += around * (loop.trip - 1) * b
    return LoopWork(flops, moved, uncounted)
