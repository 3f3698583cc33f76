"""run.json's one schema (crosstune.run.records) and metrics.jsonl's (crosstune.run.metrics): a mistyped value is
refused naming the file and the key; a run written before issue 29 (run.json format 1, `peak_memory_gb`) is read
with its keys and memory unit converted, and says so once."""

from __future__ import annotations

import json
import math

import pytest

from crosstune.errors import CrosstuneError
from crosstune.run.layout import RunDirError
from crosstune.run.metrics import read_metrics
from crosstune.run.records import RUN_FORMAT, read_run_record, update_run_record, write_run_record
from crosstune.units import GIB
from tests.helpers.records import run_record, write_record

# What crosstune wrote before issue 29 (rundir.write_run_metadata + each backend's extras + the session's finalise).
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
        {"step": i, "epoch": i / 10, "loss": 2.0, "learning_rate": 1e-3, "grad_norm": 1.0, "trained_tokens": 90,
         "tokens": 100, "computed_tokens": 100, "step_time_s": 1.0, "trained_tokens_per_s": 90.0,
         "tokens_per_s": 100.0, "peak_memory_gb": peak, "mfu": None, "mfu_computed": None, "hfu": None}
        for i, peak in enumerate(peaks, 1)
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_a_format_1_torch_run_is_read_in_todays_keys_and_says_so_once(tmp_path, capsys):
    run = old_run(tmp_path, TORCH_V1, [7.5, 7.5])
    record = read_run_record(run)
    assert (record.format, record.devices, record.processes) == (RUN_FORMAT, 2, 2)
    assert record.mesh.fsdp == 2 and record.mesh.tp == 1 and record.resumed_from_step == 10
    assert record.lora.layout.modules == 41 and record.lora.layout.params == 59392
    assert record.details == {"model_class": "Gemma4ForCausalLM", "peft_target_regex": "^model\\.layers.*$"}
    assert (record.platform, record.seq_len, record.compile_time_s, record.checkpoint_time_s) == (
        "unknown",
        None,
        None,
        None,
    )  # what format 1 never recorded for torch
    assert record.notes and "format 1" in record.notes[0]
    read_run_record(run)
    said = capsys.readouterr().err
    assert said.count("run.json of format 1") == 1 and str(run / "run.json") in said
    # its rows: torch wrote max_memory_allocated / 1024^3 (GiB) under peak_memory_gb, so the value stays
    rows = read_metrics(run)
    assert [r.peak_memory_gib for r in rows] == [7.5, 7.5] and "unchanged" in rows.notes[0]
    read_metrics(run)
    assert capsys.readouterr().err.count("peak_memory_gb") == 1


def test_a_format_1_jax_run_on_tpu_has_its_gb_converted_to_gib(tmp_path):
    """The jax backend divided peak_bytes_in_use by 10^9: 8.0 "GB" is 8e9 bytes = 7.4506 GiB."""
    run = old_run(tmp_path, JAX_V1, [8.0, None])
    record = read_run_record(run)
    assert (record.compile_time_s, record.compile_time_measure, record.lora.layout) == (14.2, "xla", None)
    assert record.details == {"replicated_tensors": ["layers.5.attn.k_einsum.w"]}
    rows = read_metrics(run)
    assert rows[0].peak_memory_gib == pytest.approx(8e9 / GIB, rel=1e-12) and rows[1].peak_memory_gib is None
    assert "GB (10^9 bytes) on tpu" in rows.notes[0]


def test_a_format_1_jax_run_on_cpu_keeps_its_host_rss_figure(tmp_path):
    run = old_run(tmp_path, JAX_V1 | {"platform": "cpu"}, [1.25])
    assert read_metrics(run)[0].peak_memory_gib == 1.25  # host RSS: ru_maxrss / 1024^2, GiB already


def test_old_rows_without_a_run_json_have_no_memory_figure(tmp_path):
    run = old_run(tmp_path, TORCH_V1, [7.5])
    (run / "run.json").unlink()
    rows = read_metrics(run)
    assert rows[0].peak_memory_gib is None and "unknown" in rows.notes[0]


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
        ({"format": 3}, r"run.json: format is 3; this crosstune reads run.json formats 1 and 2"),
    ],
)
def test_a_mistyped_record_is_refused_naming_the_file_and_key(tmp_path, change, message):
    write_record(tmp_path, "jax")
    meta = json.loads((tmp_path / "run.json").read_text())
    (tmp_path / "run.json").write_text(json.dumps(meta | change))
    with pytest.raises(RunDirError, match=message) as e:
        read_run_record(tmp_path)
    assert str(tmp_path / "run.json") in str(e.value) and "\n" not in str(e.value)


def test_a_format_1_record_with_a_key_it_never_had_is_refused(tmp_path):
    run = old_run(tmp_path, TORCH_V1 | {"hostname": "x"}, [1.0])
    with pytest.raises(RunDirError, match=r"run.json: unknown key\(s\) hostname in a run.json of format 1"):
        read_run_record(run)


def test_a_mistyped_metrics_row_is_refused_naming_file_line_and_key(tmp_path):
    row = {"step": 1, "epoch": 0.1, "loss": math.nan, "learning_rate": 1e-3, "grad_norm": 1.0, "trained_tokens": 9,
           "tokens": 10, "computed_tokens": 10, "step_time_s": 1.0, "trained_tokens_per_s": 9.0,
           "tokens_per_s": 10.0, "peak_memory_gib": 1.0, "mfu": None, "mfu_computed": None, "hfu": None}  # fmt: skip
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
    with pytest.raises(ValueError, match=r"missing \['seq_len'\]"):
        write_run_record(tmp_path, run_record("torch", seq_len=None))
    write_record(tmp_path, "torch", steps=None)
    updated = update_run_record(tmp_path, steps=7)
    assert updated.steps == 7 and read_run_record(tmp_path) == updated
    with pytest.raises(RunDirError, match=r"run.json: steps: input should be greater than or equal to 0"):
        update_run_record(tmp_path, steps=-1)
    assert read_run_record(tmp_path).steps == 7  # the refused update wrote nothing
