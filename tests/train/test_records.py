"""Both backends fill run.json and the metrics rows through one schema (crosstune.run.records, .metrics),
filled by the training session: the same keys for the same facts, one memory unit, timings on both."""

from __future__ import annotations

import json

from crosstune.run.layout import METRICS_JSONL, RUN_JSON
from crosstune.run.metrics import METRIC_DEFINITIONS
from crosstune.run.records import Mesh, read_run_record
from crosstune.units import GIB
from tests.helpers.jax_recipes import tiny_recipe


def key_paths(value: object, prefix: str = "") -> set[str]:
    """Every key path of a JSON value ("lora.layout.modules"); `details` holds each stack's own facts, so only its
    own name counts."""
    if not isinstance(value, dict) or prefix == "details":
        return set()
    paths = set()
    for key, inner in value.items():
        path = f"{prefix}.{key}" if prefix else key
        paths |= {path} | key_paths(inner, path)
    return paths


def test_both_backends_write_one_schema(three_step_runs):
    """One recipe trained by torch and by jax: run.json's key paths equal, every shared fact stated the same way,
    metrics rows with the same keys and one memory unit (GiB); torch records its compile and checkpoint seconds."""
    runs = {name: result.run_dir for name, result in three_step_runs.items()}
    raw = {name: json.loads((run / RUN_JSON).read_text()) for name, run in runs.items()}
    assert key_paths(raw["torch"]) == key_paths(raw["jax"])
    assert "world_size" not in raw["torch"] and "lora_layout" not in raw["torch"]  # format 1's torch-only keys
    torch, jax = (read_run_record(runs[name]) for name in ("torch", "jax"))
    same = ("recipe_hash", "family", "base_model", "lora", "loss_convention", "gradient_checkpointing", "global_batch")
    same += ("grad_accumulation", "seq_len", "total_steps", "steps", "resumed_from_step", "data", "precision")
    assert {k: getattr(torch, k) for k in same} == {k: getattr(jax, k) for k in same}
    # the recipe: per_device_batch_size 1, grad_accumulation 1, fsdp 1 on jax -> one row per step on both
    assert (torch.global_batch, torch.grad_accumulation, torch.steps, torch.seq_len) == (1, 1, 3, 512)
    assert (torch.devices, torch.processes, torch.mesh, torch.platform) == (1, 1, Mesh(fsdp=1, tp=1), "cpu")
    assert (jax.devices, jax.processes, jax.mesh, jax.platform) == (2, 1, Mesh(fsdp=1, tp=2), "cpu")
    assert torch.lora.layout.modules == 41 and torch.lora.layout.skipped_layers == {"v": [5]}
    assert set(torch.details) == {"parallelism", "peft_target_regex"} and set(jax.details) == {"replicated_tensors"}
    # timings: both backends, each saying how it measured compilation (CPU eager torch: its first step's warm-up)
    assert (torch.compile_time_measure, jax.compile_time_measure) == ("first-step warm-up", "xla")
    assert torch.compile_time_s >= 0 and jax.compile_time_s > 0
    assert torch.checkpoint_time_s > 0 and jax.checkpoint_time_s > 0  # both save the last step
    rows = {
        name: [json.loads(line) for line in (run / METRICS_JSONL).read_text().splitlines()]
        for name, run in runs.items()
    }
    keys = {name: {frozenset(row) for row in found} for name, found in rows.items()}
    assert keys["torch"] == keys["jax"] == {frozenset(METRIC_DEFINITIONS)}
    # one unit: on CPU both report this process's peak RSS in GiB; torch trained first, both before this line
    from crosstune.run.metrics import host_peak_rss_bytes

    now = host_peak_rss_bytes() / GIB
    memory = [row["peak_memory_gib"] for name in ("torch", "jax") for row in rows[name]]
    assert memory == sorted(memory) and 0 < memory[0] and memory[-1] <= now


def test_peak_memory_is_gib_on_both_backends(monkeypatch):
    """The accelerator figure each backend reads, in bytes, becomes the same GiB: 3 × 2^30 bytes is 3.0 on both (a
    backend dividing by 10^9 would say 3.22)."""
    import jax
    import torch

    from crosstune.train.jax import progress as jax_progress
    from crosstune.train.torch import progress as torch_progress

    class Device:
        def memory_stats(self):
            return {"peak_bytes_in_use": 3 * 2**30}

    monkeypatch.setattr(jax, "local_devices", lambda: [Device(), Device()])
    assert jax_progress.peak_memory_gib() == 3.0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 3 * 2**30)
    assert torch_progress.peak_memory_gib() == 3.0


def test_the_record_takes_the_global_batch_from_the_step_plan(tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    """train.global_batch_size decides the rows per step (crosstune.train.step_plan): the session records the plan's
    figures as training starts, before any step (timings and steps still null)."""
    from crosstune.train.session import TrainingSession

    batch = ("train.global_batch_size=4", "train.per_device_batch_size=1", "train.max_steps=2")
    recipe = tiny_recipe(tiny_gemma4_dir, synth_corpus_dir, tmp_path, "gemma4", *batch)
    session = TrainingSession(recipe, "torch", tmp_path / "run", progress=False)
    with session.started():
        record = read_run_record(session.run_dir)
    assert (record.global_batch, record.grad_accumulation, record.total_steps) == (4, 4, 2)
    assert (record.steps, record.compile_time_s, record.checkpoint_time_s) == (None, None, None)


def _calls(path, name: str) -> list[tuple[str, int]]:
    """(enclosing function, line) of every call of `name` (a plain name or an attribute) in the file."""
    import ast

    found = []

    def visit(node, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else where
            if isinstance(child, ast.Call):
                f = child.func
                if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)) == name:
                    found.append((where, child.lineno))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return found


def test_both_backends_build_their_rows_with_the_one_builder():
    """A metrics row is made in one place (crosstune.run.metrics.MetricsRowBuilder.row), its builder built in one
    (RunContext.metrics_row_builder, from the recipe), and each backend hands it only what it measured: no backend
    makes a StepMetrics, derives MFU, or says what is recomputed (the jax backend once left recompute_attention to
    a default)."""
    from tests.helpers.paths import REPO

    src = REPO / "src" / "crosstune"
    made = {f"{p.relative_to(src)}:{where}" for p in src.rglob("*.py") for where, _ in _calls(p, "StepMetrics")}
    assert made == {"run/metrics.py:row"}
    built = {f"{p.relative_to(src)}:{where}" for p in src.rglob("*.py") for where, _ in _calls(p, "MetricsRowBuilder")}
    built |= {f"{p.relative_to(src)}:{where}" for p in src.rglob("*.py") for where, _ in _calls(p, "for_recipe")}
    assert built == {"train/backend.py:metrics_row_builder"}
    users = {p.relative_to(src).as_posix() for p in src.rglob("*.py") if _calls(p, "metrics_row_builder")}
    assert users == {"train/torch/callbacks.py", "train/jax/worker.py"}
    for backend in ("torch", "jax"):
        text = "\n".join(p.read_text(encoding="utf-8") for p in (src / "train" / backend).glob("*.py"))
        assert "flops_utilisation" not in text and "recompute_attention" not in text and "StepMetrics(" not in text


def test_the_row_builder_takes_every_run_fact_from_the_recipe():
    """What a row derives from the run: the recipe's recompute policy (full, dots, selective), sequence length and
    hardware, the step plan's accumulation and epoch length, the backend's device count: the same for both."""
    from pathlib import Path

    from crosstune.families import get_family
    from crosstune.hardware import get_hardware
    from crosstune.recipe import load_recipe
    from crosstune.train.backend import RunContext
    from crosstune.train.step_plan import StepPlan
    from tests.helpers.paths import REPO

    spec = get_family("gemma4").spec("31b")
    plan = StepPlan(
        micro_batch=8, local_batch=8, accumulation=4, total_steps=10, epochs_read=1, micro_batches_per_epoch=16
    )
    for recompute, attention, matmuls in (("full", True, True), ("dots", True, False), ("selective", False, True)):
        sets = ["train.gradient_checkpointing=true", f"train.kernels.recompute={recompute}"]
        recipe = load_recipe(REPO / "recipes" / "gemma4-31b-tpu-v5p-8.yaml", sets)
        context = RunContext(recipe=recipe, run_dir=Path("run"), plan=plan, spec=spec, prepared=None, data={})
        b = context.metrics_row_builder(devices=4)
        assert (b.recompute_activations, b.recompute_attention, b.recompute_matmuls) == (True, attention, matmuls)
        assert (b.context, b.hardware, b.devices) == (recipe.data.max_seq_len, get_hardware(recipe.hardware), 4)
        row = b.row(
            step=2,
            loss=1.0,
            learning_rate=1e-4,
            grad_norm=1.0,
            trained_tokens=100,
            tokens=200,
            computed_tokens=400,
            step_time_s=2.0,
            peak_memory_gib=1.5,
        )
        assert (row.epoch, row.tokens_per_s, row.trained_tokens_per_s) == (2 * 4 / 16, 100.0, 50.0)
        per_token = spec.lora_train_flops_per_token(
            b.context, True, recompute_attention=attention, recompute_matmuls=matmuls
        )
        assert row.hfu == 400 * per_token / (2.0 * b.hardware.chip.peak_bf16_tflops * 1e12 * 4)


def test_every_recorded_row_is_the_builders_row(three_step_runs):
    """The rows both backends wrote are what the builder derives from their own measurements (epoch and rates
    recomputed here from the recipe, the step plan and each row's counts and time: the same numbers)."""
    for name, result in three_step_runs.items():
        record = read_run_record(result.run_dir)
        rows = [json.loads(line) for line in (result.run_dir / METRICS_JSONL).read_text().splitlines()]
        for row in rows:
            assert row["epoch"] > 0 and row["step"] >= 1
            assert row["tokens_per_s"] == row["tokens"] / row["step_time_s"], name
            assert row["trained_tokens_per_s"] == row["trained_tokens"] / row["step_time_s"], name
        per_step = {row["epoch"] / row["step"] for row in rows}
        assert len(per_step) == 1, (name, per_step)  # step × accumulation / micro-batches per epoch
        assert record.grad_accumulation == 1
