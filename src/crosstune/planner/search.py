"""`crosstune plan RECIPE --search`: the fastest step the recipe's hardware allows, by the compiler's word.

Candidates: activation recompute (none, full, dots: crosstune.train.jax.remat), attention (dense, splash), rows
per device, every fsdp × tp mesh whose tp divides the heads — the recipe's global batch kept by changing the
gradient accumulation — and the layers unrolled or scanned (backend.jax.scan_layers: where the model has two
groups of its layer pattern or more). Each is priced by the planner first (free: memory, and the calibrated time
the search ranks by). Then, within `max_compiles`:

1. screen: the candidates the planner ranks best (each recompute mode's in turn: what its memory says fits, the
   fastest by the calibrated time first) are compiled at two shallow depths that keep the layer pattern
   (one and two periods of it: 6 and 12 layers for Gemma's 5:1) and every figure is extrapolated linearly per layer
   to the full depth. Exact for the arguments, flops, bytes and collectives (each period of layers is the same
   program; scanned, one and two runs of the loop's body, whose later runs are counted apart from XLA's
   cost_analysis: crosstune.planner.loops); not for the temporaries, which XLA's scheduler does not grow linearly
   with depth (docs/BENCHMARKS.md): a screened total or peak is an estimate, marked as such. A scanned compile whose
   loops were not counted (an older cached record) gives no roofline rather than one group's;
2. finalists: the fastest screened candidate that fits of each recompute mode (so the frontier has a row per
   policy, and the planner is checked against XLA on each), then the next fastest, are compiled at full depth;
   their memory and roofline are XLA's own, and the winner is the fastest finalist that fits. The screen stops
   early enough to leave the budget for them.

"Fits" is XLA's peak within the chip's usable memory, its total where it reported no peak
(CompiledStep.held_bytes: a scan's total reads above what the chip holds).

Where a scanned candidate and its unrolled twin are predicted within the calibration's error
(crosstune.planner.timing.CALIBRATED_WITHIN), a note says what the scan buys: its compile time. Ties keep the
recipe's own setting. The compile itself is the caller's (`compile(overrides, layers) -> CompiledStep`:
crosstune.train.jax.aot_process in a child process with libtpu); this module only chooses, extrapolates and ranks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from crosstune.families.spec import ModelSpec
from crosstune.hardware import HardwareTarget
from crosstune.planner.aot_report import CompiledStep, Roofline, roofline
from crosstune.planner.memory import Memory
from crosstune.planner.timing import CALIBRATED_WITHIN
from crosstune.recipe import Recipe
from crosstune.units import GB

REMATS: tuple[str | None, ...] = (None, "dots", "full")
ATTENTIONS = ("splash", "dense")
SCALED = (
    "argument_bytes",
    "output_bytes",
    "alias_bytes",
    "temp_bytes",
    "peak_bytes",
    "flops",
    "bytes_accessed",
    "collective_bytes",
    "kernel_flops",
    "kernel_bytes",
    "loop_flops",
    "loop_bytes",
)
Compile = Callable[[list[str], int | None], CompiledStep]


@dataclass(frozen=True)
class Candidate:
    remat: str | None  # crosstune.train.jax.remat mode
    attention: str
    rows: int  # per device (train.per_device_batch_size)
    fsdp: int
    tp: int
    accumulation: int
    scan: bool = False  # backend.jax.scan_layers

    @property
    def label(self) -> str:
        return (
            f"{'scanned' if self.scan else 'unrolled'}, remat {self.remat or 'none'}, {self.attention}, {self.rows} "
            f"row(s)/device, fsdp {self.fsdp} × tp {self.tp}, ×{self.accumulation}"
        )

    def overrides(self, recipe: Recipe) -> list[str]:
        """The `--set` lines that make the recipe run this candidate (its global batch unchanged)."""
        out = [
            f"train.gradient_checkpointing={'false' if self.remat is None else 'true'}",
            f"train.kernels.recompute={self.remat or 'full'}",
            f"backend.jax.attention={self.attention}",
            f"train.per_device_batch_size={self.rows}",
            f"backend.jax.mesh.fsdp={self.fsdp}",
            f"backend.jax.mesh.tp={self.tp}",
        ]
        if recipe.train.global_batch_size is None:
            out.append(f"train.grad_accumulation={self.accumulation}")
        if self.scan != bool(recipe.backend.jax.scan_layers):
            out.append(f"backend.jax.scan_layers={'true' if self.scan else 'false'}")
        return out


def candidates(recipe: Recipe, spec: ModelSpec, hw: HardwareTarget, rows_total: int) -> list[Candidate]:
    """Every (remat, attention, rows, mesh, scan) that keeps the global batch (`rows_total` rows per optimizer step,
    as crosstune.train.step_plan derives it) on all of the hardware's chips; scanned only where the layers make two
    groups of their pattern or more (one group has nothing to repeat)."""
    n = hw.devices
    length = recipe.data.max_seq_len
    attentions = [a for a in ATTENTIONS if a == "dense" or (length % min(512, length) == 0 and length % 128 == 0)]
    scans = (False, True) if spec.num_layers >= 2 * spec.scan_period else (False,)
    out = []
    for tp in (t for t in range(1, n + 1) if n % t == 0 and not spec.tp_problems(t)):
        fsdp = n // tp
        for rows in (r for r in range(1, rows_total + 1) if rows_total % (r * fsdp) == 0):
            for remat in REMATS:
                for attention in attentions:
                    k = rows_total // (rows * fsdp)
                    out += [Candidate(remat, attention, rows, fsdp, tp, k, scan) for scan in scans]
    return out


def extrapolate(a: CompiledStep, b: CompiledStep, layers: int) -> CompiledStep:
    """`b` at `layers` decoder layers, each figure grown by its per-layer slope between the depths of `a` and `b`."""
    per = b.layers - a.layers
    grown = {f: getattr(b, f) + (getattr(b, f) - getattr(a, f)) * (layers - b.layers) / per for f in SCALED}
    grown = {f: (round(v) if isinstance(getattr(b, f), int) else v) for f, v in grown.items()}
    # the screen's fit reads this grown peak: an estimate like the grown total, without a scan's phantom temp_bytes;
    # a depth with no peak (an older record) would grow one from 0: none, so the total decides
    if not (a.peak_bytes and b.peak_bytes):
        grown["peak_bytes"] = 0
    times = {f: getattr(a, f) + getattr(b, f) for f in ("build_s", "lower_s", "compile_s")}
    rss = max(a.host_peak_rss_bytes, b.host_peak_rss_bytes)
    loops = {  # a depth whose loops weren't counted leaves the grown step's cost unknown (CompiledStep.roofline_note)
        "loops_counted": a.loops_counted and b.loops_counted,
        "uncounted_loops": max(a.uncounted_loops, b.uncounted_loops),
    }
    return dataclasses.replace(b, layers=layers, host_peak_rss_bytes=rss, **grown, **times, **loops)


@dataclass
class Result:
    candidate: Candidate
    planner: Memory
    step: CompiledStep | None = None  # full depth (finalist) or extrapolated (screened)
    line: Roofline | None = None
    stage: str = "planned"  # planned | screened | final | failed
    error: str = ""
    predicted_s: float | None = None  # the planner's calibrated micro-step (crosstune.planner.timing)
    tokens: int = 0  # per micro-step over the slice

    @property
    def tokens_per_s(self) -> float:
        """What the search ranks by: the calibrated prediction where there is one, else the compiled roofline."""
        if self.predicted_s:
            return self.tokens / self.predicted_s
        return self.line.tokens_per_s if self.line is not None else 0.0

    @property
    def held_gb(self) -> float | None:
        """What XLA says the step holds per chip (CompiledStep.held_bytes: its peak where reported, else its total):
        what the fit verdict and the frontier read."""
        return None if self.step is None else self.step.held_bytes / GB

    @property
    def compile_s(self) -> float | None:
        """Build, lower and XLA's compile of its step (the two depths' sum where screened)."""
        return None if self.step is None else self.step.build_s + self.step.lower_s + self.step.compile_s

    def fits(self, hbm_gb: float | None) -> bool | None:
        if self.step is None:
            return None
        return hbm_gb is None or self.step.held_bytes <= hbm_gb * GB


@dataclass
class Search:
    results: list[Result]
    winner: Result | None
    baseline: Result | None  # the recipe as it is
    compiles: int
    depths: tuple[int, int]
    notes: list[str] = field(default_factory=list)


def run_search(
    recipe: Recipe,
    spec: ModelSpec,
    hw: HardwareTarget,
    rows_total: int,
    plan_memory: Callable[[Candidate], Memory],
    compile_step: Compile,
    *,
    max_compiles: int,
    finalists: int = len(REMATS),
    baseline: Candidate | None = None,
    progress: Callable[[str], None] = lambda _: None,
    plan_time: Callable[[Candidate], float] | None = None,
) -> Search:
    """Screen, then compile finalists at full depth (see the module's docstring); at most `max_compiles` compiles
    (two per screened candidate, one per finalist: the screen keeps one for each finalist it could give, up to
    `finalists`). With `plan_time` (the calibrated micro-step of a candidate), candidates are ranked by it; the
    compiles still decide what fits."""
    usable = hw.chip.usable_gb
    p = spec.scan_period
    depths = (p, 2 * p) if 2 * p < spec.num_layers else (1, 2)
    length = recipe.data.max_seq_len
    results = [
        Result(c, plan_memory(c), predicted_s=plan_time(c) if plan_time else None, tokens=c.rows * c.fsdp * length)
        for c in candidates(recipe, spec, hw, rows_total)
    ]
    base = next((r for r in results if r.candidate == baseline), None)
    own_scan = bool(recipe.backend.jax.scan_layers)  # ties keep the recipe's setting
    order = _screen_order(results, own_scan)
    budget, screened = max_compiles, []
    for r in order:
        if budget - 2 < min(finalists, len(screened) + 1):  # two for the screen, one kept per finalist
            break
        if usable is not None and r.planner.total > 1.3 * usable:
            continue  # beyond HBM by more than the planner's error: not worth two compiles
        progress(f"screen {len(screened) + 1}: {r.candidate.label}, at {depths[0]} and {depths[1]} layers")
        budget -= 2
        try:
            a, b = (compile_step(r.candidate.overrides(recipe), d) for d in depths)
        except Exception as e:  # noqa: BLE001 (a candidate XLA can't compile is a result, not the search's end)
            r.stage, r.error = "failed", str(e).splitlines()[0][:300]
            continue
        r.step, r.stage = extrapolate(a, b, spec.num_layers), "screened"
        r.line = _roofline(r.step, hw)
        screened.append(r)
    fitting = _finalist_order([r for r in screened if r.fits(usable)])
    for r in fitting:  # until `finalists` fit at full depth or the budget is spent
        if budget < 1 or sum(1 for f in fitting if f.stage == "final" and f.fits(usable)) >= finalists:
            break
        progress(f"finalist: {r.candidate.label}, at full depth ({spec.num_layers} layers)")
        budget -= 1
        try:
            r.step = compile_step(r.candidate.overrides(recipe), None)
        except Exception as e:  # noqa: BLE001
            r.stage, r.error = "failed", str(e).splitlines()[0][:300]
            continue
        r.line, r.stage = _roofline(r.step, hw), "final"
    final = [r for r in results if r.stage == "final" and r.fits(usable)]
    winner = max(final, key=lambda r: (r.tokens_per_s, r.candidate.scan == own_scan), default=None)
    notes = [] if winner else ["no candidate compiled at full depth fits: no winner (raise --max-compiles)"]
    notes.append(
        f"screened figures are extrapolated from {depths[0]} and {depths[1]} layers: exact per layer for the "
        "arguments, flops, bytes and collectives, not for XLA's temporaries or its peak (not linear in depth); "
        "finalists' are XLA's own at full depth"
    )
    notes += sorted({f"{r.candidate.label}: roofline {r.step.roofline_note}" for r in results if _unpriced(r)})
    if winner is not None and (tie := scan_tie(results, winner, usable)):
        notes.append(tie)
    return Search(results, winner, base, max_compiles - budget, depths, notes)


def _roofline(step: CompiledStep, hw: HardwareTarget) -> Roofline | None:
    """The step's roofline, or None where its loops' work is unknown (CompiledStep.roofline_note says why)."""
    return None if step.roofline_note else roofline(step, hw.chip)


def _unpriced(r: Result) -> bool:
    return r.step is not None and r.line is None and bool(r.step.roofline_note)


def scan_tie(results: list[Result], winner: Result, usable_gb: float | None) -> str | None:
    """What the scan buys, where the winner's twin (the same candidate scanned or unrolled) fits (XLA's word where
    it was compiled at full depth, else the planner's; not where XLA failed to compile it) and is predicted within
    the calibration's error of it: a compile that does not grow with depth."""
    flipped = dataclasses.replace(winner.candidate, scan=not winner.candidate.scan)
    twin = next((r for r in results if r.candidate == flipped), None)
    if twin is None or twin.stage == "failed" or not (winner.predicted_s and twin.predicted_s):
        return None
    if not (twin.fits(usable_gb) if twin.stage == "final" else twin.planner.fits):
        return None
    if abs(twin.predicted_s / winner.predicted_s - 1) > CALIBRATED_WITHIN:
        return None
    scanned, unrolled = (winner, twin) if winner.candidate.scan else (twin, winner)
    measured = ""
    if scanned.stage == unrolled.stage == "final":
        measured = f" (here at full depth: {scanned.compile_s:.0f} s against {unrolled.compile_s:.0f} s)"
    return (
        f"{twin.candidate.label} is predicted within the calibration's ±{CALIBRATED_WITHIN * 100:.0f} % of the winner "
        f"({twin.tokens_per_s:,.0f} against {winner.tokens_per_s:,.0f} tokens/s): the scan buys compile time, XLA "
        f"compiling one group of layers instead of every layer{measured}; planner memory per chip: "
        f"{scanned.planner.total:,.1f} GB scanned, {unrolled.planner.total:,.1f} GB unrolled"
    )


def _finalist_order(fitting: list[Result]) -> list[Result]:
    """The fastest screened candidate of each recompute mode (fastest mode first), then the others, fastest first."""
    fast = sorted(fitting, key=lambda r: -r.tokens_per_s)
    firsts = [
        next(r for r in fast if r.candidate.remat == mode) for mode in dict.fromkeys(r.candidate.remat for r in fast)
    ]
    return firsts + [r for r in fast if r not in firsts]


def _screen_order(results: list[Result], own_scan: bool) -> list[Result]:
    """The order to screen in: the planner's best candidate of each recompute mode in turn (none, dots, full), then
    each mode's next best. Within a mode what the planner says fits first, then the fastest by the calibrated
    prediction (Result.predicted_s, in its exact order: what the winner is chosen by, so the budget goes to the
    candidates that could win), then splash before dense, larger tp, less memory and the recipe's own scan setting
    (`own_scan`): the whole order where nothing is predicted, the ties' order where something is."""

    def key(r: Result) -> tuple:
        c = r.candidate
        faster = -r.tokens / r.predicted_s if r.predicted_s else 0.0
        return (not r.planner.fits, faster, c.attention != "splash", -c.tp, r.planner.total, c.scan != own_scan)

    by_mode = {mode: sorted((r for r in results if r.candidate.remat == mode), key=key) for mode in REMATS}
    out = []
    for i in range(max(map(len, by_mode.values()), default=0)):
        out += [rs[i] for rs in by_mode.values() if i < len(rs)]
    return out
