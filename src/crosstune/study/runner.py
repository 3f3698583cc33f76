"""`run_study`: the stages in order into one bundle, each skipped when its inputs are unchanged and its outputs still
hash as recorded, redone (outputs removed first) when its inputs changed, resumed when an earlier run died in it.
A stage that is redone makes every later stage that reads it (directly or through another) stale at once: marked
so in the manifest and out of the bundle's contents (what `report` reads) until it is redone too.

Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.study"."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from crosstune.confinement import remove
from crosstune.cost.prices import load_prices
from crosstune.emit import yaml_text
from crosstune.errors import CrosstuneError, Interrupted
from crosstune.fsutil import atomic_write_text, exclusive_lock, lock_path
from crosstune.ownership import check_out, unlisted
from crosstune.recipe import recipe_hash
from crosstune.study import evaluation, recovery, serving, stages
from crosstune.study.bundle import (
    RESOLVED_RECIPE,
    StudyError,
    fingerprint,
    new_manifest,
    open_bundle,
    read_manifest,
    write_manifest,
)
from crosstune.study.bundle_schema import CONTENT_KEYS, INPUTS_FORMAT, BundleManifest, Contents, StageEntry
from crosstune.study.context import (
    BASE,
    BENCH,
    COST,
    DATA,
    EXPORT,
    OPTIONAL_STAGES,
    PARITY,
    PLAN,
    SERVE,
    StudyContext,
    load_study_recipe,
    run_rel,
    study_overrides,
)
from crosstune.study.machine import accelerator_summary, describe_machine
from crosstune.train.backend import BACKENDS


@dataclass(frozen=True)
class Stage:
    name: str
    title: str
    inputs: Callable[[StudyContext], dict[str, Any]]
    run: Callable[[StudyContext], Any]
    folders: Callable[[StudyContext], list[str]]  # what the stage writes (bundle-relative): removed before a redo
    reads: tuple[str, ...] = ()  # earlier stages whose outputs it reads: their hashes are among its inputs, and
    # redoing one of them makes this stage stale (an optional stage only when the study runs it)
    optional: bool = False  # runs only when asked (--with): OPTIONAL_STAGES


def _folders(*rels: str) -> Callable[[StudyContext], list[str]]:
    return lambda s: list(rels)


STAGES: list[Stage] = [
    Stage("pretrain", "the small Gemma 4 base (crosstune pretrain)", stages.pretrain_inputs, stages.run_pretrain,
          _folders(BASE), optional=True),
    Stage("prepare", "prepare the data (crosstune.data)", stages.prepare_inputs, stages.run_prepare, _folders(DATA),
          reads=("pretrain",)),
    Stage("plan", "plan mesh and memory (crosstune.planner)", stages.plan_inputs, stages.run_plan, _folders(PLAN)),
    Stage("parity", "both backends on one step (crosstune parity)", stages.parity_inputs, stages.run_parity,
          _folders(PARITY), reads=("pretrain", "prepare"), optional=True),
    Stage("train", "train the LoRA (train.session)", stages.train_inputs, stages.run_train, stages.train_folders,
          reads=("pretrain", "prepare")),
    Stage("export", "export merged model + adapter", stages.export_inputs, stages.run_export, _folders(EXPORT),
          reads=("pretrain", "train")),
    Stage("serve", "serve with vLLM", serving.serve_inputs, serving.run_serve, _folders(SERVE), reads=("export",)),
    Stage("bench", "benchmark the serve grid", serving.bench_inputs, serving.run_bench, _folders(BENCH),
          reads=("export", "serve")),
    Stage("eval", "pass@k (crosstune.evals)", evaluation.eval_inputs, evaluation.run_eval, evaluation.eval_folders,
          reads=("export",)),
    Stage("eval-base", "pass@k of the base", evaluation.eval_base_inputs, evaluation.run_eval_base,
          evaluation.eval_base_folders, reads=("pretrain",), optional=True),
    Stage("cost", "training and serving cost", evaluation.cost_inputs, evaluation.run_cost, _folders(COST),
          reads=("train", "bench")),
]  # fmt: skip
STAGE_NAMES = [st.name for st in STAGES if not st.optional]  # what a study runs unless asked for more (--with)
ALL_STAGES = [st.name for st in STAGES]


def _stage_list() -> str:
    return f"{', '.join(STAGE_NAMES)} (and with --with: {', '.join(OPTIONAL_STAGES)})"


def select_stages(
    only: list[str] | None = None, from_stage: str | None = None, with_: tuple[str, ...] = ()
) -> list[Stage]:
    """The stages to consider: all (the optional ones only when `with_` names them), those from `from_stage` on,
    or exactly `only` (in pipeline order)."""
    for name in with_:
        if name not in OPTIONAL_STAGES:
            raise StudyError(
                f"--with {name!r}: one of {', '.join(OPTIONAL_STAGES)} (the stages a study runs only when asked)"
            )
    if only is not None and from_stage is not None:
        raise StudyError("give --from or --only, not both")
    if only is not None and not only:  # `--only ''` or `--only ,` is no stage, never all eight
        raise StudyError(f"--only names no stage: give one or more of {', '.join(STAGE_NAMES)}, comma-separated")
    for name in [*(only or []), *([from_stage] if from_stage is not None else [])]:
        if name not in ALL_STAGES:
            raise StudyError(f"unknown stage {name!r}: the stages are {_stage_list()}")
        if name in OPTIONAL_STAGES and name not in with_:
            raise StudyError(f"stage {name} runs only when asked: add --with {name}")
    pipeline = [st for st in STAGES if not st.optional or st.name in with_]
    if only:
        return [st for st in pipeline if st.name in only]
    names = [st.name for st in pipeline]
    return pipeline[names.index(from_stage) :] if from_stage is not None else pipeline


def is_worker(launch: dict[str, Any]) -> bool:
    """A process of a several-process run that is not its lead: torch node_rank > 0, or JAX process > 0 (set by
    JAX's own variables, or by GKE on TPU slices). Such a process trains its part and records nothing."""
    if int(launch.get("node_rank") or 0) > 0:
        return True
    return any(_process_index(k) > 0 for k in ("JAX_PROCESS_ID", "TPU_WORKER_ID"))


def _process_index(variable: str) -> int:
    value = os.environ.get(variable) or "0"
    if not value.strip().isdigit():
        raise StudyError(
            f"{variable}={value!r}: not a process index (an integer >= 0, 0 = the lead): unset it or "
            "give this host's index"
        )
    return int(value)


def _refresh_contents(manifest: BundleManifest) -> None:
    contents = Contents()
    for name in ALL_STAGES:
        entry = manifest.stages.get(name)
        if entry is not None and entry.status == "done" and entry.contents is not None:
            for key in CONTENT_KEYS:
                listed = getattr(contents, key)
                listed += [r for r in getattr(entry.contents, key) if r not in listed]
    manifest.contents = contents


def run_study(
    recipe_file: Path,
    backend: str | None,
    out: Path,
    *,
    overrides: list[str] | None = None,
    only: list[str] | None = None,
    from_stage: str | None = None,
    launch: dict[str, Any] | None = None,
    prices: Path | None = None,
    bucket: str | None = None,
    console: Console | None = None,
    with_: tuple[str, ...] = (),
    pretrain_steps: int | None = None,
    pretrain_cache: Path | None = None,
) -> BundleManifest:
    """Run (or resume) the study of `recipe_file` on `backend` into the bundle `out`; returns the manifest. With
    `bucket`, the bundle has a copy there, pulled first when this machine's is missing or behind, pushed after every
    stage and checkpoint (crosstune.study.recovery). `with_`: the optional stages to run too (OPTIONAL_STAGES);
    `pretrain_steps` / `pretrain_cache`: the pretrain stage's steps and cache folder."""
    console = console or Console(soft_wrap=True, highlight=False)
    check_out(Path(out).expanduser(), error=StudyError)  # before anything: a file, or inside one (ownership's rule)
    bundle, launch = Path(out).expanduser().resolve(), dict(launch or {})
    if backend is not None and backend not in BACKENDS:  # before the bundle is claimed: it records the backend
        raise StudyError(f"--backend {backend!r}: one of {', '.join(BACKENDS)}")
    chosen = select_stages(only, from_stage, tuple(with_))
    with_ = tuple(name for name in OPTIONAL_STAGES if name in with_)  # pipeline order, once each
    if prices is not None and not Path(prices).is_file():
        raise StudyError(f"--prices {prices}: no such file (a YAML of price overrides, as `crosstune cost` reads)")
    if prices is not None:
        load_prices(prices)  # read and checked before any stage: the cost stage comes last
    recipe = load_study_recipe(recipe_file, bundle, overrides, with_)
    backend = backend or recipe.backend.default
    options = {
        "with_": with_,
        "recipe_file": Path(recipe_file),
        "pretrain_steps": pretrain_steps,
        "pretrain_cache": pretrain_cache,
        "overrides": (*(overrides or []), *study_overrides(bundle, with_)),
    }
    preflight = StudyContext(
        bundle, recipe, backend, console, new_manifest(recipe.name, backend), launch, prices, **options
    )
    if "pretrain" in with_:
        stages.check_pretrain(preflight)
    preflight.check_recipe_paths([st.name for st in chosen], Path(recipe_file))
    copy = recovery.study_copy(bucket, bundle)
    if is_worker(launch):
        if [st.name for st in chosen] != ["train"]:
            raise StudyError("a worker process (node rank or JAX process > 0) only trains its part: give --only train")
        manifest = read_manifest(bundle) or new_manifest(recipe.name, backend)
        ctx = StudyContext(bundle, recipe, backend, console, manifest, launch, prices, **options)
        stages.run_train(ctx)
        return ctx.manifest
    hint = "wait for that study to finish, or give another --out"
    with exclusive_lock(lock_path(bundle), f"the study bundle {bundle}", hint):
        if copy is not None:
            recovery.restore_from_bucket(copy, run_rel(recipe, backend), console, recipe=recipe.name, backend=backend)
        manifest = open_bundle(bundle, recipe.name, backend)
        bundle.mkdir(parents=True, exist_ok=True)
        atomic_write_text(bundle / RESOLVED_RECIPE, yaml_text(recipe.model_dump(mode="json")))
        host = describe_machine()
        manifest.recipe.hash, manifest.recipe.source = recipe_hash(recipe), str(Path(recipe_file).resolve())
        manifest.recipe.resolved, manifest.recipe.overrides = RESOLVED_RECIPE, list(overrides or [])
        manifest.with_ = list(with_)
        manifest.hosts[host["hostname"]] = host
        write_manifest(bundle, manifest)
        console.print(f"study of {recipe.name} ({backend}) on {host['hostname']}: {accelerator_summary(host)}")
        ctx = StudyContext(bundle, recipe, backend, console, manifest, launch, prices, bucket=copy, **options)
        ctx.server = serving.Server(ctx)
        try:
            for i, stage in enumerate(chosen, 1):
                _run_stage(ctx, stage, f"[{i}/{len(chosen)}]")
        finally:
            ctx.server.close()
        recovery.push_bundle(copy, console, strict=True)
        console.print(f"bundle: {bundle}  (compare bundles: crosstune report {bundle} OTHER_BUNDLE --out DIR)")
        return manifest


def stage_inputs(ctx: StudyContext, stage: Stage) -> str:
    """The fingerprint of what `stage` depends on: its own inputs and the recorded outputs of the stages it reads."""
    reads = {
        name: [o.model_dump(mode="json") for o in ctx.outputs_of(name)]
        for name in stage.reads
        if name not in OPTIONAL_STAGES or name in ctx.with_
    }
    return fingerprint({"format": INPUTS_FORMAT, "reads": reads, **stage.inputs(ctx)})


def mark_stale_after(manifest: BundleManifest, redone: str) -> list[str]:
    """Mark stale every recorded stage after `redone` that reads it, directly or through another; their names."""
    upstream, marked = {redone}, []
    for st in STAGES[ALL_STAGES.index(redone) + 1 :]:
        if not upstream & set(st.reads):
            continue
        upstream.add(st.name)
        entry = manifest.stages.get(st.name)
        if entry is not None and entry.status != "stale":
            entry.was, entry.status, entry.stale = entry.status, "stale", f"{redone} was redone after it"
            marked.append(st.name)
    return marked


def _unmark(manifest: BundleManifest, names: list[str]) -> None:
    """Give stages marked stale by a redo whose outputs came out as recorded before their status back: what they
    read is what they read then."""
    for name in names:
        entry = manifest.stages[name]
        entry.status, entry.was, entry.stale = entry.was or "done", None, None


def _run_stage(ctx: StudyContext, stage: Stage, counter: str) -> None:
    console, manifest, bundle = ctx.console, ctx.manifest, ctx.bundle
    t0 = time.perf_counter()
    inputs = stage_inputs(ctx, stage)
    entry = manifest.stages.get(stage.name)
    before = entry.outputs if entry is not None else None  # what the later stages read, if it finished
    if entry is not None:
        currency = entry.currency(inputs, bundle)
        if currency.action == "keep":
            took = time.perf_counter() - t0
            console.print(f"{counter} {stage.name}: {currency.why} ({took:.1f} s) — {entry.note or ''}")
            return
        console.print(f"{counter} {stage.name}: {currency.why}")
        if currency.action == "redo":
            _clear(ctx, stage, entry)
    console.rule(f"{counter} {stage.name}: {stage.title}", align="left")
    running = StageEntry(
        status="running",
        inputs=inputs,
        inputs_format=INPUTS_FORMAT,
        host=socket.gethostname(),
        pid=os.getpid(),
        started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    manifest.stages[stage.name] = running
    if stale := mark_stale_after(manifest, stage.name):  # written with "running": a kill -9 leaves them stale
        console.print(f"   {', '.join(stale)}: stale until redone (they read what {stage.name} rewrites)")
    _refresh_contents(manifest)
    write_manifest(bundle, manifest)
    recovery.push_bundle(ctx.bucket, console)  # the bucket's copy says so too (and drops what a redo clears)
    try:
        result = stage.run(ctx)
    except (KeyboardInterrupt, Interrupted):  # a stage's own Interrupted says what it kept (the evaluator's does)
        _finish(ctx, stage, running, t0, status="interrupted")
        raise Interrupted(
            f"interrupted (Ctrl-C) in stage {stage.name}: finished stages are kept in {bundle}; run the same command "
            "again to resume (training continues from its last checkpoint, evaluation from its cached samples)"
        ) from None
    except CrosstuneError as e:
        _finish(ctx, stage, running, t0, status="failed", error=str(e)[:2000])
        raise StudyError(
            f"stage {stage.name} failed: {e} — the finished stages are kept in {bundle}: fix this and run the same "
            "command again"
        ) from e
    except BaseException as e:
        _finish(ctx, stage, running, t0, status="failed", error=str(e)[:2000])
        raise
    running.note, running.record = result.note, result.record
    running.outputs = [o.record(bundle) for o in result.outputs]
    running.contents = Contents(**result.contents) if result.contents else None
    if stale and before is not None and _dumped(running.outputs) == _dumped(before):
        _unmark(manifest, stale)
        console.print(f"   {', '.join(stale)}: up to date again ({stage.name}'s outputs came out as recorded)")
    _finish(ctx, stage, running, t0, status=result.status)
    mark = "done" if result.status == "done" else "skipped"
    console.print(f"{counter} {stage.name}: {mark} in {time.perf_counter() - t0:.1f} s — {result.note}")


def _written(ctx: StudyContext, stage: Stage) -> list[str]:
    """Every file under the stage's folders, bundle-relative: what it wrote (its folders were emptied before)."""
    return unlisted(ctx.bundle, stage.folders(ctx), ())


def _dumped(outputs: list) -> list[dict[str, Any]]:
    return [o.model_dump(mode="json") for o in outputs]


def _clear(ctx: StudyContext, stage: Stage, entry: StageEntry) -> None:
    """Remove the stage's folders before a redo; refused, naming the file, when one holds a file the stage did not
    write (crosstune.ownership's rule: a command replaces only what its manifest, here bundle.json's `wrote`, says
    it wrote). A stage recorded before the study listed what it wrote (no `wrote`) is cleared as before."""
    if entry.wrote is not None and (foreign := unlisted(ctx.bundle, stage.folders(ctx), entry.wrote)):
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise StudyError(
            f"stage {stage.name} must be redone, which replaces its folders, but they hold files it did not "
            f"write: {shown} (in {ctx.bundle}): move them out of the bundle, then run the same command again"
        )
    for rel in stage.folders(ctx):
        where = ctx.bundle / rel
        remove(where)


def _finish(
    ctx: StudyContext, stage: Stage, entry: StageEntry, t0: float, *, status: str, error: str | None = None
) -> None:
    entry.status, entry.seconds, entry.wrote = status, round(time.perf_counter() - t0, 3), _written(ctx, stage)
    entry.error, entry.pid = error, None
    ctx.manifest.stages[stage.name] = entry
    _refresh_contents(ctx.manifest)
    write_manifest(ctx.bundle, ctx.manifest)
    recovery.push_bundle(ctx.bucket, ctx.console)  # the finished stage reaches the bucket (preemption)
