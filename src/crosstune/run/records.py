"""run.json's one schema, typed, the same keys for the same facts on both backends, checked when written and when
read (`read_run_record`: every reader — resume, export, cost, report, study, demo — comes through here).

Who fills it: the training session writes the record when training starts (crosstune.run.rundir.start_run_record:
the recipe, the step plan, the data, the LoRA layout from the base's spec, and StackFacts — what only the backend
knows); the backend's lead process adds its timings when training ends (MetricsWriter.finish); the session adds
`steps` last. A run.json of format 1 (torch wrote world_size / lora_layout / resumed_from, jax devices / mesh) is
read with its keys converted, and says so once; the conversion is `_from_format_1`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from crosstune.families.base import HF_TARGET_MODULES
from crosstune.families.spec import ModelSpec
from crosstune.fsutil import atomic_write_text, say
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
    layout: LoraLayout | None = Field(
        description="what the LoRA adapts, from the base's spec (the same on both backends); null: a jax run.json "
        "of format 1, which recorded none"
    )


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
    """<run>/run.json. Null timings and steps: training has not ended (or ran before format 2)."""

    format: Positive = Field(description=f"the schema's version ({RUN_FORMAT}; 1 is read converted)")
    backend: BackendName
    recipe_name: str
    recipe_hash: str
    family: str
    base_model: str | None = Field(description="the base checkpoint trained on (export's default --base)")
    base_model_revision: str | None = Field(
        None, description="the hub commit base_model was resolved to when model.path is a hub id (base_model is then "
        "that snapshot's folder in the hub cache); null: a local folder"
    )  # fmt: skip
    dtype: str
    hardware: str
    lora: LoraRecord
    loss_convention: str = Field(description="the loss every metrics row reports (crosstune.run.metrics)")
    gradient_checkpointing: bool = Field(description="activations recomputed in the backward pass")
    global_batch: Positive | None = Field(
        description="rows per optimizer step over all devices (crosstune.train.step_plan, from "
        "train.global_batch_size); null: a format-1 run stopped before it finished"
    )
    grad_accumulation: Positive | None = Field(description="micro-batches per optimizer step (null: as global_batch)")
    seq_len: Positive | None = Field(description="tokens per prepared row (null: a torch run.json of format 1)")
    total_steps: Positive | None = Field(description="optimizer steps planned (null: a torch run.json of format 1)")
    resumed_from_step: Count = Field(description="the checkpoint this training started from (0: from the start)")
    steps: Count | None = Field(description="the step the final adapter belongs to (null: training has not ended)")
    data: DataRecord
    versions: dict[str, str]
    created: str
    _notes: list[str] = PrivateAttr(default_factory=list)

    @property
    def notes(self) -> list[str]:
        """What the reader changed to read this record (a format-1 run.json's converted keys), for reports."""
        return list(self._notes)


RUN_FIELD_DEFINITIONS: dict[str, str] = {
    name: f.description for name, f in RunRecord.model_fields.items() if f.description
}  # docs/BACKEND_EQUIVALENCE.md lists them
_NOT_NULL_WHEN_WRITTEN = ("global_batch", "grad_accumulation", "seq_len", "total_steps")
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
    a record built with model_copy, or a field left null that every new run has, is refused here."""
    checked = _validated(record.model_dump(), Path(run_dir) / RUN_JSON)
    missing = [name for name in _NOT_NULL_WHEN_WRITTEN if getattr(checked, name) is None]
    if checked.format != RUN_FORMAT or checked.lora.layout is None or missing:
        raise ValueError(f"a run.json of format {RUN_FORMAT} records every field; missing {missing or 'lora.layout'}")
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
    value has the wrong type or range. Format 1 is converted (and said once per file)."""
    path = run_file(run_dir, RUN_JSON)
    if not path.is_file():
        raise RunDirError(f"{run_dir}: no {RUN_JSON} — not a crosstune run directory")
    raw = read_json(path, f"run.json is written by `crosstune train`: {_RESTORE}")
    if not isinstance(raw, dict):
        raise RunDirError(f"{path}: not a JSON object; {_RESTORE}")
    version = raw.get("format")
    if version == 1:
        raw, converted = _from_format_1(raw, path)
        record = _validated(raw, path)
        record._notes.append(converted)
        _say_once(path, converted)
        return record
    if version != RUN_FORMAT:
        raise RunDirError(
            f"{path}: format is {version!r}; this crosstune reads run.json formats 1 and {RUN_FORMAT} (a newer "
            "crosstune wrote it: upgrade crosstune)"
        )
    return _validated(raw, path)


def _validated(raw: dict, path: Path) -> RunRecord:
    try:
        return RunRecord.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "<root>"
        got = "" if first["type"] == "missing" else f" (got {first['input']!r})"
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise RunDirError(f"{path}: {key}: {first['msg'].lower()}{got}{more}; {_RESTORE}") from None


_SAID: set[Path] = set()


def _say_once(path: Path, note: str) -> None:
    if path.resolve() not in _SAID:
        _SAID.add(path.resolve())
        say(f"[run] {path}: {note}")


def _from_format_1(raw: dict, path: Path) -> tuple[dict, str]:
    """A format-1 run.json in today's keys, and the sentence saying what was converted. torch: world_size →
    devices and processes, fsdp → mesh (fsdp = world size, tp = 1), lora_layout → lora.layout, resumed_from (a
    checkpoint path) → resumed_from_step, model_class / target_regex → details; jax: replicated_tensors →
    details. What format 1 never recorded stays null: the platform of a torch run (read as "unknown"), a jax run's
    LoRA layout, torch's seq_len / total_steps and compile / checkpoint times."""
    old = dict(raw)
    torch = old.get("backend") == "torch"
    out = {k: old.pop(k) for k in list(old) if k in RunRecord.model_fields}
    out.update(format=RUN_FORMAT, loss_convention=LOSS_CONVENTION)
    for name in ("global_batch", "grad_accumulation", "seq_len", "total_steps", "steps", "compile_time_s"):
        out.setdefault(name, None)
    out.setdefault("checkpoint_time_s", None)
    out.setdefault("resumed_from_step", 0)
    out["compile_time_measure"] = "xla" if out["compile_time_s"] is not None and not torch else None
    lora = dict(out.get("lora") or {})
    layout = old.pop("lora_layout", None)
    details: dict[str, Any] = {}
    if torch:
        world = old.pop("world_size", 1)
        fsdp = bool(old.pop("fsdp", False))
        out.update(devices=world, processes=world, mesh={"fsdp": world if fsdp else 1, "tp": 1})
        out.setdefault("platform", "unknown")
        resumed = old.pop("resumed_from", None)
        found = re.search(r"checkpoint-(\d+)$", resumed or "")
        out["resumed_from_step"] = int(found.group(1)) if found else 0
        details["model_class"] = old.pop("model_class", None)
        if layout:
            details["peft_target_regex"] = layout.get("target_regex")
            lora["layout"] = {
                "modules": layout.get("modules"),
                "params": layout.get("trainable_params"),
                "targets_by_layer_type": layout.get("targets_by_layer_type", {}),
                "skipped_layers": layout.get("skipped_layers", {}),
                "notes": layout.get("notes", []),
            }
    else:
        details["replicated_tensors"] = old.pop("replicated_tensors", [])
    lora.setdefault("layout", None)
    out.update(lora=lora, details=details)
    if old:  # keys format 1 never had: the file is not one crosstune wrote
        raise RunDirError(f"{path}: unknown key(s) {', '.join(sorted(old))} in a run.json of format 1; {_RESTORE}")
    what = "world_size, fsdp, lora_layout, resumed_from" if torch else "replicated_tensors"
    return (
        out,
        f"run.json of format 1 (before crosstune recorded one schema for both backends): read with {what} "
        "converted to today's keys; what it never recorded is shown as n/a",
    )
