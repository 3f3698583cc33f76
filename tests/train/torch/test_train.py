"""The torch backend (TRL SFTTrainer + PEFT LoRA) on tiny Gemma 3 / Gemma 4: loss goes down, the loss is
token-weighted across gradient accumulation, resume after SIGKILL reproduces the curve, merge equals base + adapter,
and the configuration TRL/accelerate get is the recipe's."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from crosstune.recipe import load_recipe
from crosstune.run.metrics import METRIC_DEFINITIONS, read_metrics
from crosstune.run.records import Mesh, read_run_record
from tests.helpers.export import assert_logits_close
from tests.helpers.multimodal import tiny_multimodal_gemma4
from tests.helpers.paths import HELPERS
from tests.helpers.ports import free_port

# PEFT vs merged fp32 weights: measured <= 1.4e-5 x max|logit|; an adapter moves logits by > 1e-2 x.
RELTOL = 5e-5

# One fixed tiny training set: 8 records (lenient: too-long ones are skipped) -> 6 rows of 512 tokens, 1 doc each.
RECIPE = """\
name: torch-{family}
output_dir: {root}/runs
model: {{family: {family}, path: {model}, dtype: float32}}
lora: {{rank: 8, alpha: 16, dropout: 0.0, targets: [q, k, v, o, gate, up, down]}}
data:
  sources: [{{path: {corpus}/train.jsonl}}]
  max_seq_len: 512
  packing: true
  strict: false
  subsample: {{size: 8, seed: 42}}
  prepared_dir: {root}/prepared-{family}-512
train:
  max_steps: 12
  learning_rate: 3.0e-3
  schedule: constant
  per_device_batch_size: 1
  grad_accumulation: 2
  gradient_checkpointing: false
  precision: fp32
  log_every: 1
  checkpoint_every: 2
  keep_last: 5
  seed: 42
hardware: cpu
"""
ROWS, STEPS_PER_EPOCH = 6, 3  # global batch 2
# Gemma 3 takes the other path through the same knobs: whole batch per step, gradient checkpointing on.
VARIANT = {
    "gemma4": [],
    "gemma3": ["train.per_device_batch_size=2", "train.grad_accumulation=1", "train.gradient_checkpointing=true"],
}
LOSS_DROP = 0.15  # nats, mean of the 4th epoch vs the 1st (same 6 rows); see test_loss_decreases

# Cross-process tolerances. Ranks sum partial results that gloo then all-reduces, while one process sums the same
# terms in another order: an fp32 sum of n terms then differs by ~√n·u relative (u = 2⁻²⁴ ≈ 6e-8 per rounding,
# rounding errors adding like a random walk; n·u would be the worst case). No test may rely on one machine's order.
UNIT_ROUNDOFF = 2.0**-24
# A step's loss reduces V = 1024 logits per token (log-sum-exp) and T ≈ 1e3 trained tokens: √(V·T)·u ≈ 6e-5.
# Each gradient element is a sum over the same T tokens, and the grad norm a sum over the LoRA elements: the same.
STEP_REL = math.sqrt(1024 * 1024) * UNIT_ROUNDOFF


def adapter_rel(steps: int) -> float:
    """Relative difference (‖a − b‖ / ‖b‖ per tensor) of adapters after `steps` AdamW steps. Adam's early updates are
    close to lr·sign(g): the elements whose gradient lies within rounding noise of zero (a fraction ≈ STEP_REL of
    them, for a smooth gradient distribution) may step the other way, which in norm is ≈ √STEP_REL of a tensor's
    movement per step; the rest differ by STEP_REL. Wrong rows, rates or gradient syncs differ by O(1)."""
    return steps * math.sqrt(STEP_REL)


def step_rel(step: int) -> float:
    """Relative tolerance of step `step`'s loss or gradient norm between two runs that sum in another order. Step 1
    sees the same weights (STEP_REL); later steps see adapters already apart by adapter_rel(step - 1), and the LoRA
    delta s·B·A, a product of two such factors, moves by up to twice that (first order)."""
    return STEP_REL + (2 * adapter_rel(step - 1) if step > 1 else 0.0)


def assert_steps_close(ours: list[float], theirs: list[float]) -> None:
    assert len(ours) == len(theirs)
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True), 1):
        assert a == pytest.approx(b, rel=step_rel(step)), f"step {step}: {a} vs {b} (rel limit {step_rel(step):.1e})"


def recipe_file(root: Path, family: str, model: Path, corpus: Path) -> Path:
    path = root / f"{family}.yaml"
    path.write_text(RECIPE.format(family=family, root=root, model=model, corpus=corpus))
    return path


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_gemma3_dir, tiny_gemma4_dir, synth_corpus_dir):
    """Recipe files for both families, their data prepared once."""
    from crosstune.data import prepare_dataset

    root = tmp_path_factory.mktemp("torch_backend")
    files = {}
    for family, model in (("gemma3", tiny_gemma3_dir), ("gemma4", tiny_gemma4_dir)):
        files[family] = recipe_file(root, family, model, synth_corpus_dir)
        prepared = prepare_dataset(load_recipe(files[family], VARIANT[family]))
        assert len(prepared.split("train")) == ROWS
    return root, files


@pytest.fixture(scope="module")
def reference_runs(workspace):
    """One uninterrupted 12-step run per family (4 epochs of the same 6 rows), shared by several tests."""
    from crosstune.train.session import train

    root, files = workspace
    runs = {}
    for family, path in files.items():
        recipe = load_recipe(path, VARIANT[family])
        runs[family] = train(recipe, root / "runs" / f"reference-{family}", progress=False, backend="torch")
    return runs


# --- training -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["gemma3", "gemma4"])
def test_loss_decreases_and_run_dir_is_complete(reference_runs, family):
    """A random tiny Gemma's logits are spread (embedding std 0.1), so it starts above the uniform ln(1024) = 6.93
    (iid logits of std s give ln V + s²/2); a 20 % drop in 12 steps is out of reach, so the margin is in nats."""
    result = reference_runs[family]
    rows = read_metrics(result.run_dir)
    assert [r.step for r in rows] == list(range(1, 13)) and result.steps == 12
    assert set(rows[0].model_dump()) == set(METRIC_DEFINITIONS)
    first = sum(r.loss for r in rows[:STEPS_PER_EPOCH]) / STEPS_PER_EPOCH
    last = sum(r.loss for r in rows[-STEPS_PER_EPOCH:]) / STEPS_PER_EPOCH
    assert math.log(1024) < rows[0].loss < math.log(1024) + 4  # random logits: above uniform, not wildly
    assert last <= first - LOSS_DROP, (first, last)
    assert result.final_loss == rows[-1].loss == result.losses[-1]
    for r in rows:
        assert r.epoch == pytest.approx(r.step / STEPS_PER_EPOCH)
        assert 0 < r.trained_tokens < r.tokens <= 2 * 512
        assert r.learning_rate == pytest.approx(3e-3) and r.grad_norm > 0 and r.mfu is None
        assert r.trained_tokens_per_s == pytest.approx(r.trained_tokens / r.step_time_s)

    run = result.run_dir
    record = read_run_record(run)
    assert record.backend == "torch" and record.family == family and record.steps == 12
    assert record.precision == "fp32" and record.devices == 1 and record.mesh == Mesh(fsdp=1, tp=1)
    assert record.gradient_checkpointing is (family == "gemma3") and record.platform == "cpu"
    assert (run / "recipe.yaml").is_file() and (run / "loss.png").stat().st_size > 5000
    assert any((run / "tensorboard").iterdir())
    # every 2 steps, the last 5 kept, complete ones only
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [f"checkpoint-{s}" for s in (10, 12, 4, 6, 8)]
    assert {p.name for p in (run / "adapter").iterdir()} >= {"adapter_config.json", "adapter_model.safetensors"}


def test_gemma4_v_target_skips_global_layers(reference_runs):
    from safetensors import safe_open

    layout = read_run_record(reference_runs["gemma4"].run_dir).lora.layout
    assert layout.skipped_layers == {"v": [5]} and layout.modules == 41
    assert layout.targets_by_layer_type["global"] == ["q", "k", "o", "gate", "up", "down"]
    assert "v adapts 5 of 6 layers" in layout.notes[0]
    with safe_open(reference_runs["gemma4"].run_dir / "adapter" / "adapter_model.safetensors", "pt") as f:
        keys = list(f.keys())
    assert len(keys) == 2 * 41 and not any("layers.5.self_attn.v_proj" in k for k in keys)
    gemma3 = read_run_record(reference_runs["gemma3"].run_dir).lora.layout
    assert gemma3.skipped_layers == {} and gemma3.modules == 7 * 6


def test_fresh_run_refuses_a_run_dir_with_checkpoints(reference_runs, workspace):
    from crosstune.train.backend import TrainError
    from crosstune.train.session import train

    _, files = workspace
    with pytest.raises(TrainError, match="earlier run: pass --resume"):
        train(load_recipe(files["gemma4"]), reference_runs["gemma4"].run_dir, progress=False, backend="torch")


# --- the loss TRL computes is the one metrics.py defines ------------------------------------------------------------
def hand_step(model_dir: Path, adapter_dir: Path, rows: list[dict]) -> tuple[float, float, float, int]:
    """Step 1 by hand: every document of the step's rows on its own (no packing, no TRL), cross-entropy summed over
    the labelled tokens (a document's first token has no prediction) -> token-weighted mean, per-micro-batch mean,
    the L2 norm of the LoRA gradients of the token-weighted loss (the run's LoRA A, B = 0 as at step 1), and the
    number of trained tokens."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter_dir, is_trainable=True)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.zero_()  # step 1 ran with PEFT's B = 0 (A is unchanged by a zero-gradient first step)
    sums, counts = [], []
    for row in rows:
        total, count, start = 0.0, 0, 0
        for length in row["seq_lengths"]:
            ids = torch.tensor(row["input_ids"][start : start + length])[None]
            labels = torch.tensor(row["labels"][start : start + length])[None]
            logits = model(input_ids=ids, use_cache=False).logits[:, :-1]
            target = labels[:, 1:]
            total = total + torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=-100, reduction="sum"
            )
            count += int((target != -100).sum())
            start += length
        sums.append(total)
        counts.append(count)
    loss = sum(sums) / sum(counts)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for n, p in model.named_parameters() if p.requires_grad])
    per_micro_batch = sum(float(s) / c for s, c in zip(sums, counts, strict=True)) / len(rows)
    return float(loss), per_micro_batch, float(grads.norm()), sum(counts)


@pytest.mark.parametrize("layout", ["text-only", "multimodal"])
def test_grad_accumulation_is_token_weighted(workspace, tmp_path, tiny_gemma4_dir, layout):
    """Gradient accumulation over 2 packed rows with different trained-token counts: the logged loss and the gradient
    norm are those of sum(token losses) / (trained tokens of the whole step). Multimodal Gemma classes declare
    `accepts_loss_kwargs = False`, which would make Trainer fall back to a per-micro-batch mean."""
    from crosstune.data import load_prepared, prepare_dataset, torch_dataset
    from crosstune.train.session import train

    root, files = workspace
    model_dir = tiny_gemma4_dir
    if layout == "multimodal":
        model_dir = tiny_multimodal_gemma4(tiny_gemma4_dir, tmp_path / "tiny-gemma4-mm")
    overrides = [
        f"model.path={model_dir}",
        "data.max_seq_len=1024",  # two documents per row: exercises restarting position ids
        f"data.prepared_dir={root}/prepared-gemma4-1024",  # same tokenizer: both layouts share it
        "train.max_steps=1",
        "train.max_grad_norm=null",
    ]
    recipe = load_recipe(files["gemma4"], overrides)
    prepared = prepare_dataset(recipe)
    rows = torch_dataset(load_prepared(recipe), "train", seed=42).select(range(2)).to_list()
    assert any(len(r["seq_lengths"]) > 1 for r in rows)  # a packed row: position ids restart inside it
    result = train(recipe, tmp_path / "run", progress=False, backend="torch")
    logged = read_metrics(result.run_dir)[0]

    loss, per_micro_batch, grad_norm, trained = hand_step(model_dir, result.run_dir / "adapter", rows)
    assert abs(loss - per_micro_batch) > 1e-3  # the two normalisations really differ on these rows
    assert logged.loss == pytest.approx(loss, abs=1e-5)
    assert logged.grad_norm == pytest.approx(grad_norm, rel=1e-4)
    assert logged.trained_tokens == trained
    assert prepared.max_seq_len == 1024
    if layout == "multimodal":
        from safetensors import safe_open

        with safe_open(result.run_dir / "adapter" / "adapter_model.safetensors", "pt") as f:
            keys = list(f.keys())
        assert len(keys) == 2 * 41 and all(".language_model.layers." in k for k in keys)


# --- resume -------------------------------------------------------------------------------------------------------
def test_resume_after_sigkill_reproduces_the_curve(reference_runs, workspace, tmp_path):
    """`crosstune train` in a subprocess, SIGKILLed once a checkpoint exists; `--resume` then ends on the same
    losses as the uninterrupted run, step by step."""
    from crosstune.train.session import train

    _, files = workspace
    run = tmp_path / "killed"
    cli = Path(sys.executable).parent / "crosstune"
    cmd = [str(cli), "train", str(files["gemma4"]), "--backend", "torch", "--run-dir", str(run)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))
    deadline = time.monotonic() + 240
    while not (run / "checkpoints" / "checkpoint-4").is_dir():
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 240 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = len(read_metrics(run))
    assert killed_at < 12, "the run finished before it was killed"

    result = train(load_recipe(files["gemma4"]), run, resume=True, progress=False, backend="torch")
    resumed_from = read_run_record(run).resumed_from_step
    assert 4 <= resumed_from <= killed_at and resumed_from % 2 == 0
    expected = reference_runs["gemma4"].losses
    assert [r.step for r in read_metrics(run)] == list(range(1, 13))
    assert result.losses == pytest.approx(expected, abs=1e-5)


# --- merge --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["gemma3", "gemma4"])
def test_merged_model_equals_base_plus_adapter(reference_runs, tmp_path, family):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from crosstune.export import export_run

    run = reference_runs[family].run_dir
    base_dir = Path(read_run_record(run).base_model)
    out = export_run(run, "merged", tmp_path / "merged")["merged"]  # streamed; sharded bases: test_export.py
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (base_dir / name).read_bytes(), name

    ids = torch.tensor([[2, 17, 200, 31, 999, 64, 5, 300, 301, 302, 12, 77]])
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits
        with_adapter = PeftModel.from_pretrained(base, run / "adapter").eval()(input_ids=ids).logits
        merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()(input_ids=ids).logits
    assert (with_adapter - base_logits).abs().max() > 1e-3  # the adapter changes the model
    assert_logits_close(merged.numpy(), with_adapter.numpy(), rel=RELTOL)


@pytest.mark.slow
def test_two_cpu_processes_via_the_launcher_match_one(reference_runs, workspace, tmp_path):
    """`crosstune train --devices 2` on CPU (torchrun + gloo; accelerate runs it as DDP): 2 ranks × 1 row give the
    losses of 1 process × 2 accumulated rows."""
    _, files = workspace
    run = tmp_path / "ddp"
    cli = Path(sys.executable).parent / "crosstune"
    cmd = [str(cli), "train", str(files["gemma4"]), "--backend", "torch", "--run-dir", str(run), "--devices", "2"]
    cmd += ["--set", "train.grad_accumulation=1", "--set", "train.max_steps=4"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    losses = [r.loss for r in read_metrics(run)]
    assert_steps_close(losses, reference_runs["gemma4"].losses[:4])  # summed in another order
    record = read_run_record(run)
    assert (record.devices, record.processes, record.mesh) == (2, 2, Mesh(fsdp=1, tp=1))  # DDP: replicated


# --- FSDP2 ----------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # 2 worker processes + a reference run (~25 CPU s); the accelerate config is tested just above
def test_fsdp2_over_two_gloo_processes_matches_one_process(workspace, tmp_path):
    """The FSDP2 path (accelerate's fully_shard per Gemma4TextDecoderLayer) on 2 CPU processes over gloo, 1 row each,
    against 1 process accumulating the same 2 rows: the same losses, gradient norms and adapter up to fp32 rounding
    in another summation order (step_rel, adapter_rel; Adam's sign-like early steps let near-zero gradients flip)."""
    from safetensors.torch import load_file

    from crosstune.train.session import TrainingSession, train
    from crosstune.train.torch.launch import write_worker_context

    _, files = workspace
    four_steps = ["train.max_steps=4", "train.checkpoint_every=4"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        reference = train(
            load_recipe(files["gemma4"], four_steps), tmp_path / "single", progress=False, backend="torch"
        )
    finally:
        torch.set_num_threads(threads)

    sharded = ["backend.torch.devices=2", "backend.torch.fsdp=true", "train.grad_accumulation=1"]
    run = tmp_path / "fsdp"
    session = TrainingSession(load_recipe(files["gemma4"], [*four_steps, *sharded]), "torch", run, progress=False)
    with session.started():  # the run directory claimed and the context settled, as `crosstune train` does
        context_file = write_worker_context(session.context)
    worker = HELPERS / "fsdp_worker.py"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={free_port()}"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([*cmd, str(worker), str(context_file)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]

    probe = json.loads((run / "fsdp_probe.json").read_text())
    assert sum("Gemma4TextDecoderLayer" in u for u in probe["fsdp_units"]) == 6 and probe["all_params_dtensor"]
    assert probe["local_shape"][0] * 2 == probe["global_shape"][0]  # each rank holds half of every parameter
    # Every base parameter was still on the meta device when fully_shard ran (each rank then read
    # only its rows of the checkpoint); the LoRA weights were real (the shared initial LoRA installed in them).
    assert probe["meta_before_shard"] == probe["params"] - 2 * 41 and probe["lora_meta_before_shard"] == 0
    record = read_run_record(run)  # as production runs it on CPU; this worker shards anyway (the probe above)
    assert record.devices == 2 and record.details["parallelism"] == "DDP (accelerate runs FSDP as DDP on CPU)"
    assert (run / "checkpoints" / "checkpoint-4" / "adapter_model.safetensors").is_file()

    ours, theirs = read_metrics(run), read_metrics(reference.run_dir)
    assert [r.trained_tokens for r in ours] == [r.trained_tokens for r in theirs]
    assert_steps_close([r.loss for r in ours], [r.loss for r in theirs])
    assert_steps_close([r.grad_norm for r in ours], [r.grad_norm for r in theirs])
    a = load_file(run / "adapter" / "adapter_model.safetensors")
    b = load_file(reference.run_dir / "adapter" / "adapter_model.safetensors")
    assert a.keys() == b.keys()
    worst = max(float((a[k] - b[k]).norm() / b[k].norm()) for k in a)
    assert worst <= adapter_rel(4), f"adapter tensors differ by up to {worst:.2e} relative"
