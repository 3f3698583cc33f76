"""What `crosstune plan` does beyond the planner's estimate: the recipe's jax step compiled for its TPU topology
(crosstune.train.jax.aot_process, in a child process with libtpu) and set against the planner, and the search over
remat, attention, rows, meshes and the layers' scan (crosstune.planner.search) with its compile cache.

A mesh the planner refuses (heads tp can't split, device count) is refused before compiling; a memory verdict is
the compiler's to give."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crosstune.errors import CrosstuneError
from crosstune.hardware import HARDWARE, HardwareTarget
from crosstune.planner import plan_recipe
from crosstune.planner.aot_report import CompiledStep, compile_report, with_layers
from crosstune.planner.planned_recipe import load_for_plan
from crosstune.planner.search import Candidate, Search, run_search
from crosstune.untrusted_files import read_json


class PlanError(CrosstuneError):
    """A plan that can't be compiled or searched here; the message says why and what to do."""


def tpu_hardware(recipe, what: str) -> HardwareTarget:
    """The recipe's hardware, which must be a TPU target for `what` (--compile, --search)."""
    hw = HARDWARE[recipe.hardware]
    if hw.tpu_topology is None:
        tpus = ", ".join(h.name for h in HARDWARE.values() if h.tpu_topology)
        raise PlanError(f"hardware {hw.name}: {what} compiles for a TPU topology: set hardware to one of {tpus}")
    return hw


def compiled_plan(recipe_file: Path, overrides: list[str], recipe, result, layers: int | None) -> dict[str, Any]:
    """XLA's verdict on the recipe's jax step (its first `layers` decoder layers, or all) beside the planner's."""
    from crosstune.train.parts import compile_step

    hw = tpu_hardware(recipe, "--compile")
    short = with_layers(result.spec, layers) if layers is not None else result.spec
    try:
        step = compile_step(recipe_file, overrides, layers, accelerator=hw.name.removeprefix("tpu-"))
    except ValueError as e:
        raise PlanError(str(e)) from None
    return compile_report(plan_recipe(recipe, "jax", spec=short), step)


def measured_plan(
    recipe_file: Path, overrides: list[str], layers: int | None, steps: int, profile: Path | None, say
) -> dict[str, Any]:
    """`plan --run`: the recipe's jax step timed on the attached devices (its mesh fitted to them, as `hardware:
    auto` does), beside the planner's time and memory for the same layers there (crosstune.planner.measured); and
    where the recipe names other hardware, the planner's time for it at full depth, by the same calibration."""
    from crosstune.planner.measured import MeasuredStep, measured_report
    from crosstune.planner.memory import scan_keeps_every_residual
    from crosstune.planner.timing import predict_step
    from crosstune.train.parts import measure_step

    recipe = load_for_plan(recipe_file, overrides + ["hardware=auto"])
    for note in recipe.warnings:
        if note.path in ("hardware", "backend.jax.mesh"):
            say(note.message)
    result = plan_recipe(recipe, "jax")
    refused = [b for b in result.blockers if b not in result.memory_blockers]
    if refused:
        raise PlanError(f"the plan can't run on the attached {recipe.hardware}: " + "; ".join(refused))
    short = with_layers(result.spec, layers) if layers is not None else result.spec
    planned = plan_recipe(recipe, "jax", spec=short)
    if not planned.jax_memory.fits:  # the compile decides, the planner being an estimate: said, not refused
        fixes = "fewer --layers, or recompute activations: train.gradient_checkpointing: true"
        if scan_keeps_every_residual(recipe):
            fixes += ", or unroll the layers: backend.jax.scan_layers: false (a scan without recompute keeps more)"
        say(
            f"the planner predicts {planned.jax_memory.total:.1f} GB per chip for {short.num_layers} layers, over the "
            f"{planned.jax_memory.usable:.1f} a program may hold: XLA's compile decides (if it refuses: {fixes})"
        )
    try:
        step = MeasuredStep.from_dict(measure_step(recipe, layers, steps=steps, profile_dir=profile, say=say))
    except ValueError as e:
        raise PlanError(str(e)) from None
    report = measured_report(planned, recipe, step)
    own = load_for_plan(recipe_file, overrides)
    if own.hardware != recipe.hardware and HARDWARE[own.hardware].chip.peak_bf16_tflops is not None:
        target = predict_step(plan_recipe(own, "jax"), own)
        rows = own.train.per_device_batch_size * own.backend.jax.mesh.fsdp
        report["recipe_target"] = {
            "hardware": own.hardware,
            "mesh": {"fsdp": own.backend.jax.mesh.fsdp, "tp": own.backend.jax.mesh.tp},
            "layers": plan_recipe(own, "jax").spec.num_layers,
            "micro_step_s": target.micro_step_s,
            "tokens_per_s": rows * own.data.max_seq_len / target.micro_step_s,
            "calibration": target.calibration,
        }
    return report


def compile_key(recipe_file: Path, overrides: list[str], layers: int | None) -> str:
    """What a compile's result depends on: the recipe as the --set lines resolve it (so a recipe that took a
    candidate's settings finds that candidate's compiles), the depth, and the code of the jax step and of its
    analysis (crosstune.train.parts.step_code_files)."""
    from crosstune.train.parts import step_code_files

    code = step_code_files()
    resolved = load_for_plan(recipe_file, overrides).model_dump(mode="json")
    parts = [json.dumps([resolved, layers], sort_keys=True)]
    parts += [p.read_text(encoding="utf-8") for p in code]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def cached_compile(
    recipe_file: Path, overrides: list[str], layers: int | None, accelerator: str, cache: Path | None, echo=None
) -> tuple[CompiledStep, Path | None]:
    """(the recipe's step compiled for its TPU topology, the cached file it came from or None): with `cache`, each
    compile is kept as <cache>/<compile_key>.json and reused while its key holds (`plan --search --cache`,
    bench/tpu_step.py)."""
    from crosstune.fsutil import atomic_write_text
    from crosstune.train.parts import compile_step

    kept = None if cache is None else cache / f"{compile_key(recipe_file, overrides, layers)}.json"
    if kept is not None and kept.is_file():
        return CompiledStep.from_dict(read_json(kept)), kept
    step = compile_step(recipe_file, overrides, layers, accelerator, echo=echo)
    if kept is not None:
        kept.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(kept, json.dumps(dataclasses.asdict(step), indent=1))
    return step, None


def search_plan(
    recipe_file: Path,
    overrides: list[str],
    recipe,
    max_compiles: int,
    cache: Path | None = None,
    *,
    status: Callable[[str], None] = lambda line: None,
    say: Callable[[str], None] = lambda line: None,
) -> tuple[Search, HardwareTarget]:
    """`plan --search`: crosstune.planner.search with the compiler in a child process; `status` gets what is being
    compiled, `say` the search's own lines. With `cache`, each compile's CompiledStep is kept as
    <cache>/<compile_key>.json and reused."""
    from crosstune.train.parts import find_libtpu, remat_mode
    from crosstune.train.step_plan import accumulation

    hw = tpu_hardware(recipe, "--search")
    find_libtpu()
    spec = plan_recipe(recipe, "jax").spec
    m, t = recipe.backend.jax.mesh, recipe.train
    rows = t.per_device_batch_size * m.fsdp * accumulation(t, m.fsdp)
    jax_section = recipe.backend.jax
    k = accumulation(t, m.fsdp)
    scan = bool(jax_section.scan_layers)
    baseline = Candidate(remat_mode(t), jax_section.attention, t.per_device_batch_size, m.fsdp, m.tp, k, scan)

    @functools.cache
    def planned(c: Candidate):  # the candidate's recipe and plan, read once for its memory and its time
        candidate = load_for_plan(recipe_file, overrides + c.overrides(recipe))
        return plan_recipe(candidate, "jax"), candidate

    def memory(c: Candidate):
        return planned(c)[0].jax_memory

    def seconds(c: Candidate) -> float:  # the calibrated micro-step the search ranks by
        from crosstune.planner.timing import predict_step

        return predict_step(*planned(c)).micro_step_s

    done = [0]

    def compile_one(extra: list[str], depth: int | None) -> CompiledStep:
        done[0] += 1
        what = f"compile {done[0]}/{max_compiles} ({'full depth' if depth is None else f'{depth} layers'})"
        status(what)
        echo = lambda line: status(f"{what}: {line.strip()[:90]}")  # noqa: E731
        step, kept = cached_compile(recipe_file, overrides + extra, depth, hw.name.removeprefix("tpu-"), cache, echo)
        if kept is not None:
            say(f"  {what}: reused {kept}")
        return step

    found = run_search(
        recipe,
        spec,
        hw,
        rows,
        memory,
        compile_one,
        max_compiles=max_compiles,
        baseline=baseline,
        progress=say,
        plan_time=seconds,
    )
    return found, hw
