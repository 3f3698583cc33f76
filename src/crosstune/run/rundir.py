"""Creating a run directory: holding it for one training process, and writing its recipe.yaml and run.json
(names: crosstune.run.layout; run.json's schema: crosstune.run.records). A run directory is resumed in place:
run.json proves it a run (crosstune.ownership.claim), so a fresh run never writes into a user's folder."""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import platform
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crosstune.emit import yaml_text
from crosstune.families.spec import ModelSpec
from crosstune.fsutil import atomic_write_text, exclusive_lock, say
from crosstune.ownership import ResumedKind, claim
from crosstune.recipe import Recipe, model_path, model_snapshot, recipe_hash, resolve_path
from crosstune.run.layout import LOCK, RECIPE_YAML, RUN_JSON
from crosstune.run.records import (
    LOSS_CONVENTION,
    RUN_FORMAT,
    DataRecord,
    LoraRecord,
    RunRecord,
    StackFacts,
    lora_layout,
    write_run_record,
)
from crosstune.run.resume import check_resume

VERSIONED = (
    "torch",
    "transformers",
    "peft",
    "trl",
    "accelerate",
    "jax",
    "flax",
    "optax",
    "orbax-checkpoint",
    "grain",
    "qwix",
    "google-tunix",
    "safetensors",
)


def default_run_dir(recipe: Recipe, backend: str) -> Path:
    return resolve_path(recipe, recipe.output_dir) / f"{recipe.name}-{backend}"


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in VERSIONED:
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    return out


def _run_json(run_dir: Path) -> Path | None:
    return run_dir / RUN_JSON if (run_dir / RUN_JSON).is_file() else None


# The lock may be there before run.json: a run killed while it set up (before run.json) is not a user's folder.
RUN_FOLDER = ResumedKind("crosstune train", RUN_JSON, "run directory", _run_json, transient=(LOCK,))


@contextlib.contextmanager
def held_run_dir(run_dir: Path, recipe: Recipe, backend: str, *, resume: bool, lead: bool = True) -> Iterator[Path]:
    """Both backends' entry to a run directory: the absolute path (resolved once, here: Orbax refuses relative
    ones); a non-empty folder without run.json refused (ownership's rule: a run writes only into its own folder);
    held exclusively for the run's life (<run>/.lock; a second `crosstune train` into it is refused naming this
    process), and on --resume the recipe checked against the one the run was trained with.
    `lead`: this process owns the run (torch launcher / jax process 0); other processes only get the path."""

    run_dir = Path(run_dir).expanduser().resolve()
    if not lead:
        yield run_dir
        return
    claim(run_dir, RUN_FOLDER, label="--run-dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    hint = "wait for that run to finish, or choose another --run-dir"
    with exclusive_lock(run_dir / LOCK, f"run directory {run_dir}", hint):
        if resume:
            for note in check_resume(run_dir, recipe, backend):
                say(note)
        yield run_dir


def start_run_record(
    run_dir: Path,
    recipe: Recipe,
    backend: str,
    facts: StackFacts,
    *,
    spec: ModelSpec,
    global_batch: int,
    grad_accumulation: int,
    seq_len: int,
    total_steps: int,
    resumed_from_step: int,
    data: dict[str, Any],
) -> RunRecord:
    """recipe.yaml + run.json when training starts, with everything export needs (family, LoRA rank/alpha/targets,
    base path) and every fact a report compares, in the same keys for both backends; timings and `steps` stay null
    until the run records them."""
    base = model_path(recipe) if recipe.model.path else None
    snapshot = model_snapshot(recipe) if recipe.model.path else None  # a hub id: the commit it resolved to
    lora = recipe.lora
    record = RunRecord(
        format=RUN_FORMAT,
        backend=backend,
        recipe_name=recipe.name,
        recipe_hash=recipe_hash(recipe),
        family=recipe.model.family,
        base_model=None if base is None else str(base),
        base_model_revision=None if snapshot is None else snapshot.commit,
        dtype=recipe.model.dtype,
        hardware=recipe.hardware,
        lora=LoraRecord(
            rank=lora.rank,
            alpha=float(lora.alpha),
            dropout=float(lora.dropout),
            targets=list(lora.targets),
            layout=lora_layout(spec, list(lora.targets), lora.rank),
        ),
        loss_convention=LOSS_CONVENTION,
        gradient_checkpointing=recipe.train.gradient_checkpointing,
        global_batch=global_batch,
        grad_accumulation=grad_accumulation,
        seq_len=seq_len,
        total_steps=total_steps,
        resumed_from_step=resumed_from_step,
        steps=None,
        compile_time_s=None,
        compile_time_measure=None,
        checkpoint_time_s=None,
        data=DataRecord.model_validate(data),
        versions=versions(),
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **dict(facts),
    )
    atomic_write_text(run_dir / RECIPE_YAML, yaml_text(recipe.model_dump(mode="json")))
    write_run_record(run_dir, record)
    return record
