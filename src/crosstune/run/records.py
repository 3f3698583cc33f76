"""run.json's one schema, typed, the same keys for the same facts on both backends, checked when written and when
read (`read_run_record`: every reader — resume, export, cost, report, study, demo — comes through here).

Who fills it: the training session writes the record when training starts (crosstune.run.rundir.start_run_record:
the recipe, the step plan, the data, the LoRA layout from the base's spec, and StackFacts — what only the backend
knows); the backend's lead process adds its timings when training ends (MetricsWriter.finish); the session adds
`steps` last. A run.json of an earlier format (1: before one schema for both backends) is refused, naming the format
epoch (crosstune.FORMAT_EPOCH).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crosstune.errors import before_epoch, validation_line
from crosstune.families.base import HF_TARGET_MODULES
from crosstune.families.spec import ModelSpec
from crosstune.fsutil import atomic_write_text
from crosstune.recipe.schema import BackendName
from crosstune.run.layout import _RESTORE, RUN_JSON, RunDirError, run_file
from crosstune.untrusted_files import read_json

RUN_FORMAT = 2
LOSS_CONVENTION = "assistant-only token-mean CE"  # crosstune.run.metrics' loss: the same definition on both backends

Count = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(gt=0)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
CompileMeasure = Literal["xla", "torch.compile", "first-step warm-up"]


class _Record(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class Mesh(_Record):
    fsdp: Positive = Field(description="devices the parameters and optimizer state are sharded over (1: replicated)")
    tp: Positive = Field(description="devices each layer is split over (tensor parallel; torch: 1)")


class LoraLayout(_Record):
    modules: Positive = Field(description="projection modules adapted, counted in the HF (PEFT) layout")
    params: Positive = Field(
        description="LoRA parameters trained: r × (in + out) per adapted module (jax stores the held-zero blocks of "
        "its fused k/v block LoRA besides; they are not trained and not counted)"
    )
    targets_by_layer_type: dict[str, list[str]]
    skipped_layers: dict[str, list[int]] = Field(description="target -> layers that have no such projection")
    notes: list[str]


class LoraRecord(_Record):
    rank: Positive
    alpha: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    dropout: Annotated[float, Field(ge=0, lt=1)]
    targets: list[str]
    layout: LoraLayout = Field(description="what the LoRA adapts, from the base's spec (the same on both backends)")


class DataRecord(_Record):
    """crosstune.data.prepare.data_provenance: which prepared data the run read."""

    prepared_dir: str
    data_hash: str | None
    chat_template_sha256: str | None
    lenient: bool
    skipped_records: Count
    skipped_by_reason: dict[str, int]
    dropped_records: Count
    dropped_by_reason: dict[str, int]
    train_rows: Count
    warnings: list[str]


class StackFacts(_Record):
    """What only the backend can say about where and how it trains (Backend.facts)."""

    platform: str = Field(description="the device kind trained on: torch's device type (cuda, cpu), jax's platform")
    precision: Literal["bf16", "fp32"] = Field(description="the base model's compute precision (LoRA, optimizer: fp32)")
    devices: Positive = Field(description="devices training together (torch: the world size; jax: fsdp × tp)")
    processes: Positive = Field(description="processes of the run (torch: one per device; jax: one per host)")
    mesh: Mesh = Field(description="how the devices hold the model (torch: fsdp = the world size under FSDP2)")
    details: dict[str, Any] = Field(
        description="what only this stack has (torch: parallelism, PEFT's target regex; jax: tensors replicated "
        "instead of sharded); shown nowhere side by side"
    )


class RunTimings(_Record):
    """The seconds a run spent outside its steps (metrics.jsonl's step_time_s leaves them out), once per run."""

    compile_time_s: Seconds | None = Field(
        description="compilation kept out of the step times, measured as `compile_time_measure` says: xla (jax: "
        "tracing, lowering and compiling the train step), torch.compile (torch with train.kernels.compile: dynamo "
        "and inductor, forward and backward graphs), first-step warm-up (torch, eager: the first step's wall time "
        "over the next measured steps' mean — CUDA/cuBLAS set-up, allocator growth); null: not measured (a one-step "
        "torch run has no later step to compare with)"
    )
    compile_time_measure: CompileMeasure | None
    checkpoint_time_s: Seconds | None = Field(description="checkpoint saves, kept out of the step times")


class RunRecord(RunTimings, StackFacts):
    """<run>/run.json. Null timings and steps: training has not ended."""

    format: Positive = Field(description=f"the schema's version ({RUN_FORMAT})")
    backend: BackendName
    recipe_name: str
    recipe_hash: str
    family: str
    base_model: str | None = Field(description="the base checkpoint trained on (export's default --base)")
    base_model_revision: str | None = Field(
        None,
        description="the hub commit base_model was resolved to when model.path is a hub id (base_model is then "
        "that snapshot's folder in the hub cache); null: a local folder",
    )
    dtype: str
    hardware: str
    lora: LoraRecord
    loss_convention: str = Field(description="the loss every metrics row reports (crosstune.run.metrics)")
    gradient_checkpointing: bool = Field(description="activations recomputed in the backward pass")
    global_batch: Positive = Field(
        description="rows per optimizer step over all devices (crosstune.train.step_plan, from train.global_batch_size)"
    )
    grad_accumulation: Positive = Field(description="micro-batches per optimizer step")
    seq_len: Positive = Field(description="tokens per prepared row")
    total_steps: Positive = Field(description="optimizer steps planned")
    resumed_from_step: Count = Field(description="the checkpoint this training started from (0: from the start)")
    steps: Count | None = Field(description="the step the final adapter belongs to (null: training has not ended)")
    data: DataRecord
    versions: dict[str, str]
    created: str


_HEAD = ("format", "backend", "recipe_name", "recipe_hash", "family", "base_model", "base_model_revision", "dtype",
         "hardware")  # fmt: skip
_ORDER = (*_HEAD, *(name for name in RunRecord.model_fields if name not in _HEAD))  # run.json's key order


def lora_layout(spec: ModelSpec, targets: list[str], rank: int) -> LoraLayout:
    """The projections `targets` adapt on the base `spec` (Gemma 4's k_eq_v layers have no v_proj)."""
    present = [spec.targets_present(i, targets) for i in range(spec.num_layers)]
    by_kind: dict[str, list[str]] = {}
    for i, kind in enumerate(spec.layer_types):
        by_kind.setdefault(kind, present[i])
    skipped = {t: [i for i, got in enumerate(present) if t not in got] for t in targets}
    skipped = {t: layers for t, layers in skipped.items() if layers}
    notes = [
        f"{t} adapts {spec.num_layers - len(layers)} of {spec.num_layers} layers: layers {layers} "
        f"({', '.join(sorted({spec.layer_types[i] for i in layers}))}) have no {HF_TARGET_MODULES[t]} "
        f"({'; '.join(dict.fromkeys(spec.absent_reason(i, t) for i in layers))})"
        for t, layers in skipped.items()
    ]
    modules = sum(len(got) for got in present)
    return LoraLayout(
        modules=modules,
        params=spec.lora_params(rank, targets),
        targets_by_layer_type=by_kind,
        skipped_layers=skipped,
        notes=notes,
    )


# --- writing ------------------------------------------------------------------------------------------------------
def write_run_record(run_dir: Path, record: RunRecord) -> None:
    """Replace run.json with `record` (atomically: a reader sees the old file or the new one), checked again first:
    a record built with model_copy is refused here."""
    checked = _validated(record.model_dump(), Path(run_dir) / RUN_JSON)
    if checked.format != RUN_FORMAT:
        raise ValueError(f"crosstune writes run.json format {RUN_FORMAT}, not {checked.format}")
    data = checked.model_dump(mode="json")
    atomic_write_text(Path(run_dir) / RUN_JSON, json.dumps({k: data[k] for k in _ORDER}, indent=2))


def update_run_record(run_dir: Path, **fields: Any) -> RunRecord:
    """run.json with `fields` replaced (each checked by the schema), written back; returns the new record."""
    record = read_run_record(run_dir)
    updated = _validated({**record.model_dump(), **fields}, Path(run_dir) / RUN_JSON)
    write_run_record(run_dir, updated)
    return updated


def record_timings(run_dir: Path, timings: RunTimings) -> RunRecord:
    """The backend's lead process, when training ends: its compile and checkpoint seconds into run.json."""
    return update_run_record(run_dir, **timings.model_dump())


# --- reading ------------------------------------------------------------------------------------------------------
def read_run_record(run_dir: Path) -> RunRecord:
    """run.json, typed, or an error naming the folder (missing), the file and position (corrupt), or the key whose
    value has the wrong type or range; one of an earlier format is refused (crosstune.FORMAT_EPOCH)."""
    path = run_file(run_dir, RUN_JSON)
    if not path.is_file():
        raise RunDirError(f"{run_dir}: no {RUN_JSON} — not a crosstune run directory")
    raw = read_json(path, f"run.json is written by `crosstune train`: {_RESTORE}")
    if not isinstance(raw, dict):
        raise RunDirError(f"{path}: not a JSON object; {_RESTORE}")
    version = raw.get("format")
    if isinstance(version, int) and not isinstance(version, bool) and version < RUN_FORMAT:
        raise RunDirError(before_epoch(path, f"run.json of format {version}", "train the run again"))
    if version != RUN_FORMAT:
        raise RunDirError(
            f"{path}: format is {version!r}; this crosstune reads run.json format {RUN_FORMAT} (a newer crosstune "
            "wrote it: upgrade crosstune)"
        )
    return _validated(raw, path)


def _validated(raw: dict, path: Path) -> RunRecord:
    try:
        return RunRecord.model_validate(raw)
    except ValidationError as e:
        raise RunDirError(f"{path}: {validation_line(e)}; {_RESTORE}") from None
