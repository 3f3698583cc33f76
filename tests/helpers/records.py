"""run.json records for synthetic run directories, built through the real schema (crosstune.run.records), so a test
run directory carries exactly the keys training writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crosstune.families import get_family
from crosstune.run.records import (
    LOSS_CONVENTION,
    RUN_FORMAT,
    DataRecord,
    LoraRecord,
    Mesh,
    RunRecord,
    lora_layout,
    write_run_record,
)

TARGETS = ["q", "k", "v", "o", "gate", "up", "down"]


def run_record(
    backend: str,
    *,
    hardware: str = "cpu",
    family: str = "gemma4",
    base: Path | str = "/models/tiny",
    rank: int = 8,
    alpha: float = 16.0,
    targets: list[str] = TARGETS,
    data_hash: str = "d" * 64,
    prepared_dir: Path | str = "/data/tiny",
    chat_template_sha256: str | None = "c" * 64,
    **fields: Any,
) -> RunRecord:
    """A finished run's record on the tiny `family` spec: jax on a 1×2 mesh, torch on one device; `fields` replace
    any value (checked by the schema)."""
    jax = backend == "jax"
    record = {
        "format": RUN_FORMAT,
        "backend": backend,
        "recipe_name": "tiny",
        "recipe_hash": "r" * 16,
        "family": family,
        "base_model": str(base),
        "dtype": "float32",
        "hardware": hardware,
        "platform": "cpu",
        "precision": "fp32",
        "devices": 2 if jax else 1,
        "processes": 1,
        "mesh": Mesh(fsdp=1, tp=2 if jax else 1),
        "details": {"replicated_tensors": []} if jax else {"parallelism": "one device"},
        "compile_time_s": 12.0,
        "compile_time_measure": "xla" if jax else "first-step warm-up",
        "checkpoint_time_s": 3.0,
        "lora": LoraRecord(
            rank=rank,
            alpha=float(alpha),
            dropout=0.0,
            targets=list(targets),
            layout=lora_layout(get_family(family).spec("tiny"), list(targets), rank),
        ),
        "loss_convention": LOSS_CONVENTION,
        "gradient_checkpointing": False,
        "global_batch": 2,
        "grad_accumulation": 1,
        "seq_len": 1024,
        "total_steps": 20,
        "resumed_from_step": 0,
        "steps": 20,
        "data": DataRecord(
            prepared_dir=str(prepared_dir),
            data_hash=data_hash,
            chat_template_sha256=chat_template_sha256,
            lenient=False,
            skipped_records=0,
            skipped_by_reason={},
            dropped_records=0,
            dropped_by_reason={},
            train_rows=40,
            warnings=[],
        ),
        "versions": {"python": "3.11.2", backend: "1.0"},
        "created": "2026-12-01T00:00:00+0000",
    }
    return RunRecord.model_validate({**record, **fields})


def write_record(run_dir: Path, backend: str, **kwargs: Any) -> RunRecord:
    """<run_dir>/run.json written by the schema's own writer (run_record's arguments)."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    record = run_record(backend, **kwargs)
    write_run_record(run_dir, record)
    return record
