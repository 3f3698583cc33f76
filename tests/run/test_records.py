"""run.json's one schema (crosstune.run.records) and metrics.jsonl's (crosstune.run.metrics): a mistyped value is
refused naming the file and the key; a run written before the format epoch (run.json format 1, `peak_memory_gb`) is
refused naming it."""

from __future__ import annotations

import json
import math

import pytest

from crosstune.errors import CrosstuneError
from crosstune.run.layout import RunDirError
from crosstune.run.metrics import read_metrics
from crosstune.run.records import read_run_record, update_run_record, write_run_record
from tests.helpers.records import run_record, write_record

# What crosstune wrote before its format epoch (rundir.write_run_metadata + each backend's extras + the session's
# finalise): run.json format 1.
COMMON_V1 = {
    "format": 1,
    "recipe_name": "tiny-cpu",
    "recipe_hash": "0123456789abcdef",
    "family": "gemma4",
    "base_model": "/models/tiny-gemma4",
    "dtype": "float32",
    "lora": {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": ["q", "k", "v", "o", "gate", "up", "down"]},
    "hardware": "cpu",
    "versions": {"python": "3.11.2"},
    "created": "2026-11-30T12:00:00+0000",
    "data": {
        "prepared_dir": "/data/tiny-cpu",
        "data_hash": "d" * 64,
        "chat_template_sha256": "c" * 64,
        "lenient": False,
        "skipped_records": 0,
        "skipped_by_reason": {},
        "dropped_records": 0,
        "dropped_by_reason": {},
        "train_rows": 256,
        "warnings": [],
    },
    "steps": 30,
    "global_batch": 2,
    "grad_accumulation": 1,
}
TORCH_V1 = COMMON_V1 | {
    "backend": "torch",
    "model_class": "Gemma4ForCausalLM",
    "world_size": 2,
    "precision": "fp32",
    "fsdp": True,
    "gradient_checkpointing": False,
    "resumed_from": "/runs/tiny-cpu-torch/checkpoints/checkpoint-10",
    "lora_layout": {
        "target_regex": "^model\\.layers.*$",
        "modules": 41,
        "targets_by_layer_type": {"sliding": ["q", "k", "v", "o", "gate", "up", "down"]},
        "skipped_layers": {"v": [5]},
        "notes": ["v adapts 5 of 6 layers"],
        "trainable_params": 59392,
    },
}
JAX_V1 = COMMON_V1 | {
    "backend": "jax",
    "mesh": {"fsdp": 1, "tp": 4},
    "devices": 4,
    "processes": 1,
    "platform": "tpu",
    "precision": "bf16",
    "gradient_checkpointing": True,
    "replicated_tensors": ["layers.5.attn.k_einsum.w"],
    "seq_len": 1024,
    "total_steps": 30,
    "compile_time_s": 14.2,
    "checkpoint_time_s": 3.5,
    "resumed_from_step": 0,
}


def old_run(tmp_path, meta: dict, peaks: list[float]):
    run = tmp_path / meta["backend"]
    run.mkdir()
    (run / "run.json").write_text(json.dumps(meta))
    rows = [
        {
            "step": i,
            "epoch": i / 10,
            "loss": 2.0,
            "learning_rate": 1e-3,
            "grad_norm": 1.0,
            "trained_tokens": 90,
            "tokens": 100,
            "computed_tokens": 100,
            "step_time_s": 1.0,
            "trained_tokens_per_s": 90.0,
            "tokens_per_s": 100.0,
            "peak_memory_gb": peak,
            "mfu": None,
            "mfu_computed": None,
            "hfu": None,
        }
        for i, peak in enumerate(peaks, 1)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_a_run_written_before_the_format_epoch_is_refused_naming_it(tmp_path):
    """run.json of format 1 and unit-less peak_memory_gb rows (development versions before crosstune 0.1.0's format
    epoch) are not converted: each is one line naming the file, the epoch and what to do."""
    from crosstune import FORMAT_EPOCH

    for old in (TORCH_V1, JAX_V1):
        run = old_run(tmp_path, old, [7.5, 7.5])
        epoch = f"written before crosstune {FORMAT_EPOCH}'s formats and not read by it: train the run again"
        with pytest.raises(RunDirError, match=f"run.json: run.json of format 1, {epoch}"):
            read_run_record(run)
        with pytest.raises(CrosstuneError, match=rf"metrics.jsonl:1: a row with peak_memory_gb \(no unit\), {epoch}"):
            read_metrics(run)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"compile_time_s": "12"}, r"run.json: compile_time_s: input should be a valid number \(got '12'\)"),
        ({"checkpoint_time_s": -3.0}, r"run.json: checkpoint_time_s: input should be greater than or equal to 0"),
        ({"devices": True}, r"run.json: devices: input should be a valid integer \(got True\)"),
        ({"mesh": {"fsdp": 1, "tp": "2"}}, r"run.json: mesh.tp: input should be a valid integer \(got '2'\)"),
        ({"lora": {"rank": 8}}, r"run.json: lora.alpha: field required"),
        ({"world_size": 2}, r"run.json: world_size: extra inputs are not permitted"),
        ({"backend": "tensorflow"}, r"run.json: backend: input should be 'torch' or 'jax'"),
        ({"format": 3}, r"run.json: format is 3; this crosstune reads run.json format 2 \(a newer"),
    ],
)
def test_a_mistyped_record_is_refused_naming_the_file_and_key(tmp_path, change, message):
    write_record(tmp_path, "jax")
    meta = json.loads((tmp_path / "run.json").read_text())
    (tmp_path / "run.json").write_text(json.dumps(meta | change))
    with pytest.raises(RunDirError, match=message) as e:
        read_run_record(tmp_path)
    assert str(tmp_path / "run.json") in str(e.value) and "\n" not in str(e.value)


def test_a_mistyped_metrics_row_is_refused_naming_file_line_and_key(tmp_path):
    row = {
        "step": 1,
        "epoch": 0.1,
        "loss": math.nan,
        "learning_rate": 1e-3,
        "grad_norm": 1.0,
        "trained_tokens": 9,
        "tokens": 10,
        "computed_tokens": 10,
        "step_time_s": 1.0,
        "trained_tokens_per_s": 9.0,
        "tokens_per_s": 10.0,
        "peak_memory_gib": 1.0,
        "mfu": None,
        "mfu_computed": None,
        "hfu": None,
    }
    lines = [row, row | {"step": 2, "peak_memory_gib": "1.0"}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(CrosstuneError, match=r"metrics.jsonl:2: peak_memory_gib is '1.0': input should be a valid"):
        read_metrics(tmp_path)
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row | {"peak_memory_gb": 1.0}) + "\n")
    with pytest.raises(CrosstuneError, match=r"metrics.jsonl:1: peak_memory_gb is 1.0: extra inputs"):
        read_metrics(tmp_path)  # a row naming both units is no row crosstune wrote
    assert math.isnan(read_metrics_row(tmp_path, row).loss)  # a diverged step's NaN loss is a number, kept


def read_metrics_row(tmp_path, row):
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    return read_metrics(tmp_path)[0]


def test_the_writer_refuses_a_record_missing_what_every_new_run_has(tmp_path):
    with pytest.raises(ValueError, match=r"seq_len"):
        write_run_record(tmp_path, run_record("torch", seq_len=None))
    write_record(tmp_path, "torch", steps=None)
    updated = update_run_record(tmp_path, steps=7)
    assert updated.steps == 7 and read_run_record(tmp_path) == updated
    with pytest.raises(RunDirError, match=r"run.json: steps: input should be greater than or equal to 0"):
        update_run_record(tmp_path, steps=-1)
    assert read_run_record(tmp_path).steps == 7  # the refused update wrote nothing
