"""The study's first stages, each through its area's public API: prepare (crosstune.data), plan (crosstune.planner),
train (crosstune.train.session), export (crosstune.export), and two that run only when asked (`--with`): pretrain
(crosstune.pretrain) and parity (crosstune.parity). Each has an `inputs` (what it depends on besides the
outputs of the stages it reads, which the runner adds: recipe sections and the fingerprints of the files it reads
outside the bundle) and a `run` returning a StageResult."""

from __future__ import annotations

import dataclasses
import json
import shutil
from typing import Any

from crosstune.fsutil import atomic_write_text, file_sha256, staged_dir
from crosstune.run.layout import ADAPTER, METRICS_JSONL, RUN_JSON, saved_steps
from crosstune.run.records import read_run_record
from crosstune.study.bundle import Output, StudyError
from crosstune.study.context import BASE, DATA, EXPORT, PARITY, PLAN, StageResult, StudyContext
from crosstune.untrusted_files import read_json

TRAIN_SECTIONS = ("model", "lora", "data", "train", "backend", "hardware")


# --- pretrain (--with pretrain) -----------------------------------------------------------------------------------
def pretrain_config(s: StudyContext):
    from crosstune.pretrain.base_model import PretrainConfig

    config = PretrainConfig()
    return config if s.pretrain_steps is None else dataclasses.replace(config, steps=s.pretrain_steps)


def check_pretrain(s: StudyContext) -> None:
    """Before the bundle is claimed: the base the stage trains is the model the recipe names."""
    config, model = pretrain_config(s), s.recipe.model
    if (model.family, model.size) != (config.family, config.size):
        raise StudyError(
            f"--with pretrain trains crosstune's {config.family} {config.size} base, but the recipe's "
            f"model is {model.family} {model.size}: leave out pretrain, or set model.family and "
            "model.size"
        )


def pretrain_inputs(s: StudyContext) -> dict[str, Any]:
    """The pretraining's settings (its cache key hashes them with the library versions; the copy is hashed here)."""
    from crosstune.pretrain.base_model import PRETRAIN_VERSION, config_record

    return {"config": config_record(pretrain_config(s)), "pretrain_version": PRETRAIN_VERSION}


def run_pretrain(s: StudyContext) -> StageResult:
    from crosstune.families import get_family
    from crosstune.pretrain.base_model import DONE, SHIPPED_BASES, pretrained_base

    config = pretrain_config(s)
    cached = pretrained_base(config, s.pretrain_cache, log=lambda line: s.console.print("   " + line, markup=False))
    with staged_dir(s.bundle / BASE, may_replace=lambda _: None) as tmp:  # the runs name the bundle's own copy
        shutil.copytree(cached, tmp, dirs_exist_ok=True)
    info = read_json(cached / DONE)
    spec = get_family(config.family).spec(config.size)
    source = "shipped with crosstune" if cached.parent == SHIPPED_BASES else f"cached in {cached.parent}"
    losses = f"loss {info['losses'][0]:.2f} → {info['losses'][-1]:.2f}"
    note = (
        f"{spec.total_params:,} parameters, {config.steps} steps on {len(config.task_kinds)} task kinds ({losses}, "
        f"{info['seconds']:.0f} s when built); {source}"
    )
    return StageResult(note, [Output(BASE)], record={"key": cached.name, "source": str(cached)})


# --- prepare ------------------------------------------------------------------------------------------------------
# Globs of the files that decide a model folder's tokenizer (a hub snapshot's or a local one's): prepare's inputs.
TOKENIZER_PATTERNS = ("tokenizer*", "special_tokens_map.json", "added_tokens.json", "*.jinja", "vocab.*", "merges.txt")


def prepare_inputs(s: StudyContext) -> dict[str, Any]:
    """The data settings' hash (sources by path, size and mtime) and the tokenizer's files (with the chat template):
    hashed as files, so a rerun decides in milliseconds without loading transformers."""
    from crosstune.data.prepared import data_hash, data_settings

    model = s.existing(s.model_path, "model.path")
    files = sorted({f for pattern in TOKENIZER_PATTERNS for f in (model.glob(pattern) if model else ()) if f.is_file()})
    return {
        "data_hash": data_hash(data_settings(s.recipe)),
        "tokenizer_files": {f.name: file_sha256(f) for f in files},
    }


def run_prepare(s: StudyContext) -> StageResult:
    from crosstune.data import prepare_dataset

    prepared = prepare_dataset(s.recipe, out_dir=s.bundle / DATA)
    m = prepared.manifest
    figures = prepared.figures
    split = figures.splits.get("train") if figures is not None else None
    hashes = {k: m[k] for k in ("data_hash", "tokenizer_hash", "chat_template_sha256")}
    s.manifest.data = hashes
    rows, length = (split.rows, split.row_length) if split is not None else ("?", prepared.max_seq_len)
    note = f"{rows} rows of {length} tokens"
    if prepared.reused:
        note += " (an up-to-date preparation was already there)"
    # The preparation's manifest records when it was written: left out, so a redo that comes out the same is the
    # same output (the files it lists are hashed here themselves).
    from crosstune.data.prepared import PREPARED

    return StageResult(note, [Output(DATA, skip=(PREPARED.manifest,))], record=hashes)


# --- plan ---------------------------------------------------------------------------------------------------------
def plan_inputs(s: StudyContext) -> dict[str, Any]:
    """The planner reads the model's config.json (its shapes) when there is one, else model.size; not the weights."""
    config = None if s.model_path is None else s.model_path / "config.json"
    config = s.files(config, "model.path's config.json") if config is not None and config.is_file() else None
    return {"recipe": s.section(*TRAIN_SECTIONS), "backend": s.backend, "model_config": config, **s.model_revision()}


def _memory(mem) -> dict[str, Any] | None:
    if mem is None:
        return None
    return {"total_gb": mem.total, "hbm_gb": mem.hbm, "fits": mem.fits}


def run_plan(s: StudyContext) -> StageResult:
    from crosstune.planner import plan_recipe
    from crosstune.planner.view import render_plan

    plan = plan_recipe(s.recipe, backend=s.backend)
    render_plan(plan, s.console)
    record = {
        "hardware": plan.hardware.name,
        "backend": plan.backend,
        "jax_mesh": {"fsdp": plan.jax_mesh[0], "tp": plan.jax_mesh[1]},
        "jax_memory": _memory(plan.jax_memory),
        "torch_devices": plan.torch_devices,
        "torch_memory": _memory(plan.torch_memory),
        "blockers": plan.blockers,
        "notes": plan.notes,
    }
    atomic_write_text(s.bundle / PLAN / "plan.json", json.dumps(record, indent=2) + "\n")
    if plan.blockers:
        raise StudyError(f"plan: {plan.blockers[0]} (all blockers: {s.bundle / PLAN / 'plan.json'})")
    mem = plan.jax_memory if s.backend == "jax" else plan.torch_memory
    where = "" if mem is None or mem.hbm is None else f": {mem.total:.1f} of {mem.hbm:.0f} GB per device"
    return StageResult(f"{s.backend} on {plan.hardware.name}{where}; no blocker", [Output(f"{PLAN}/plan.json")])


# --- parity (--with parity) ---------------------------------------------------------------------------------------
def parity_inputs(s: StudyContext) -> dict[str, Any]:
    return {"recipe": s.section(*TRAIN_SECTIONS), "model": s.files(s.model_path, "model.path")}


def run_parity(s: StudyContext) -> StageResult:
    """Both backends on one step of the same weights and rows (the bundle's prepared data); the stage fails when
    they disagree beyond tolerance, the verdict kept in parity/parity.json."""
    from crosstune.parity.check import run_parity as check
    from crosstune.parity.table import report_table

    report = check(s.recipe_file, list(s.overrides))
    s.console.print(report_table(report))
    record = {"ok": report.ok, **dataclasses.asdict(report)}
    atomic_write_text(s.bundle / PARITY / "parity.json", json.dumps(record, indent=2) + "\n")
    if not report.ok:
        raise StudyError(
            f"parity: the torch and jax backends disagree beyond tolerance (the table above; "
            f"{s.bundle / PARITY / 'parity.json'})"
        )
    worst = max((g.max_abs / g.scale for g in report.grads if g.scale), default=0.0)
    note = (
        f"same {report.tokens['jax']} trained tokens; loss |Δ| {report.loss_diff:.1e}, LoRA gradients within "
        f"{worst:.0e} (relative), loss after one AdamW step |Δ| {report.loss_after_diff:.1e}"
    )
    return StageResult(note, [Output(f"{PARITY}/parity.json")], record={"ok": True})


# --- train --------------------------------------------------------------------------------------------------------
def train_inputs(s: StudyContext) -> dict[str, Any]:
    model = s.files(s.model_path, "model.path")
    return {"recipe": s.section(*TRAIN_SECTIONS), "backend": s.backend, "model": model, **s.model_revision()}


def _train_outputs(s: StudyContext) -> list[Output]:
    return [Output(f"{s.run_rel}/{name}") for name in (RUN_JSON, METRICS_JSONL, ADAPTER)]


def train_folders(s: StudyContext) -> list[str]:
    return [s.run_rel]


def run_train(s: StudyContext) -> StageResult:
    from crosstune.run.resume import ResumeError
    from crosstune.train.session import TrainingSession

    resume = (s.run_dir / RUN_JSON).is_file()  # an interrupted run of the same inputs: continue it
    if resume:
        steps = saved_steps(s.run_dir)
        s.console.print(f"   resuming {s.run_dir} from " + (f"step {steps[-1]}" if steps else "step 0 (no checkpoint)"))
    bucket = None if s.bucket is None else s.bucket.sub(s.run_rel)  # pushed after every checkpoint
    session = TrainingSession(s.recipe, s.backend, s.run_dir, resume=resume, bucket=bucket, **s.launch)
    try:
        with session.started() as backend:
            result = session.fit(backend)
            lead = backend.lead
    except ResumeError:
        # Every step is checkpointed but the process died before it wrote the final adapter: export reads the
        # last checkpoint, so the run is complete.
        if not saved_steps(s.run_dir) or not (s.run_dir / METRICS_JSONL).is_file():
            raise
        return StageResult(
            f"complete at step {saved_steps(s.run_dir)[-1]} (final adapter from the last checkpoint)",
            [Output(f"{s.run_rel}/{name}") for name in (RUN_JSON, METRICS_JSONL)],
            contents={"runs": [s.run_rel]},
        )
    if not lead:
        return StageResult("this process's part of the run is done", lead=False)
    record = read_run_record(s.run_dir)
    first = result.losses[0] if result.losses else float("nan")
    note = f"{result.steps} steps, loss {first:.3f} → {result.final_loss:.3f}"
    if record.compile_time_s is not None:
        note += f", compile {record.compile_time_s:.0f} s ({record.compile_time_measure})"
    facts = {"steps": result.steps, **s.model_revision()}
    return StageResult(note, _train_outputs(s), record=facts, contents={"runs": [s.run_rel]})


# --- export -------------------------------------------------------------------------------------------------------
def export_inputs(s: StudyContext) -> dict[str, Any]:
    """The merged model is the base at model.path plus the run's LoRA: both are inputs."""
    return {"base": s.files(s.model_path, "model.path"), **s.model_revision()}


def run_export(s: StudyContext) -> StageResult:
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    from crosstune.export import export_run
    from crosstune.export.export_folder import read_export_manifest

    bar = Progress("   {task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=s.console)

    def progress(total: int):
        task = bar.add_task("merging", total=total)
        return lambda n: bar.advance(task, n)

    with bar:
        made = export_run(s.run_dir, "both", s.bundle / EXPORT, base=s.model_path, overwrite=True, progress=progress)
    step = read_export_manifest(made["merged"]).source.step
    note = f"step {step} → merged HF model and PEFT adapter"
    return StageResult(note, [Output(EXPORT)], record={"step": step})
