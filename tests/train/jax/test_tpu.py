"""The jax backend on a real TPU chip (`make test-tpu`: marker tpu, one process; skipped without a TPU, never in CI):
the training step on the chip with no stall after its compile, splash against dense attention with segment ids on
the real Pallas kernels, an Orbax resume equal to an uninterrupted run, the chip's loss against the CPU's under the
highest matmul precision, and the run's peak-memory metric against XLA's own analysis of the step.

The tiny model and corpus are built where torch is (`make tpu-fixtures`, into $CROSSTUNE_TPU_FIXTURES): a TPU host
needs no torch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tpu


@pytest.fixture(scope="module")
def chip():
    import jax

    if jax.devices()[0].platform != "tpu":
        pytest.skip("no TPU attached")
    return jax.devices()[0]


@pytest.fixture(scope="module")
def fixtures() -> Path:
    # resolved here: a relative folder would be read from the recipe's own folder (recipe paths are the recipe's)
    folder = Path(os.environ.get("CROSSTUNE_TPU_FIXTURES", "")).resolve()
    if not (folder / "model" / "config.json").is_file():
        pytest.skip("CROSSTUNE_TPU_FIXTURES has no model/: build it with `make tpu-fixtures` where torch is")
    return folder


def _recipe(fixtures: Path, out: Path, *overrides: str):
    from tests.helpers.jax_recipes import tiny_recipe

    return tiny_recipe(fixtures / "model", fixtures / "corpus", out, "gemma4", "hardware=auto", *overrides)


def _train(recipe, run_dir: Path, resume: bool = False):
    from crosstune.data import prepare_dataset
    from crosstune.train.session import train

    prepare_dataset(recipe)
    return train(recipe, run_dir, backend="jax", resume=resume, progress=False)


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_step_trains_on_the_chip_without_a_stall_after_its_compile(chip, fixtures, tmp_path):
    """Six steps on the chip: run.json says tpu, the loss falls, the peak memory is the chip's, and step 2 takes no
    longer than the steady steps (before the learning rate was evaluated on the host, step 2 compiled ~12 scalar
    programs on the chip: 0.7 s against 0.03 s)."""
    recipe = _recipe(fixtures, tmp_path, "train.max_steps=6", "train.warmup_steps=0", "train.learning_rate=3e-3")
    _train(recipe, tmp_path / "run")
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    rows = _rows(tmp_path / "run")
    assert run["platform"] == "tpu" and run["hardware"] == "tpu-v5e-1" and len(rows) == 6
    assert rows[-1]["loss"] < rows[0]["loss"]
    steady = float(np.median([r["step_time_s"] for r in rows[2:]]))
    assert rows[1]["step_time_s"] < 3 * steady + 0.05, [r["step_time_s"] for r in rows]
    assert 0 < rows[-1]["peak_memory_gib"] < 16


def test_splash_equals_dense_attention_with_segment_ids_on_the_chip(chip):
    """The Pallas kernel (not interpret mode) against jnp attention over the same causal, same-document mask, local
    window on one layer type: bf16 inputs, so the bound is bf16's: outputs are convex combinations of v, each
    rounded product and the kernel's bf16 p·v carry ≤ 2^-8 relative, a few of them: 4 · 2^-8 · max|v|."""
    import jax
    import jax.numpy as jnp

    from crosstune.train.jax.attention import splash_attention
    from crosstune.train.jax.loss import attention_mask

    length, heads, kv_heads, dim = 1024, 4, 2, 128
    kq, kk, kv = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(kq, (2, length, heads, dim), jnp.bfloat16)
    k, v = (jax.random.normal(key, (2, length, kv_heads, dim), jnp.bfloat16) for key in (kk, kv))
    segments = jnp.asarray(np.repeat(np.arange(1, 5), length // 4)[None].repeat(2, 0), jnp.int32)
    for window in (None, 256):
        got = splash_attention(q, k, v, segments, window=window, interpret=False).astype(jnp.float32)
        mask = attention_mask(segments)
        if window:
            pos = jnp.arange(length)
            mask = mask & ((pos[:, None] - pos[None, :]) < window)[None]
        keys, values = (jnp.repeat(x.astype(jnp.float32), heads // kv_heads, axis=2) for x in (k, v))
        with jax.default_matmul_precision("highest"):
            scores = jnp.einsum("btnh,bsnh->bnts", q.astype(jnp.float32), keys)
            scores = jnp.where(mask[:, None], scores, -1e30)
            want = jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(scores, axis=-1), values)
        bound = 4 * 2.0**-8 * float(jnp.max(jnp.abs(v.astype(jnp.float32))))
        assert float(jnp.max(jnp.abs(got - want))) <= bound


def test_an_orbax_resume_on_the_chip_equals_the_run_without_a_stop(chip, fixtures, tmp_path):
    """4 steps in one go against 2 steps, a stop, and a resume to 4 from the step-2 checkpoint (same chip, same
    program: the LoRA agrees to fp32 rounding of the restored state, 1e-6 relative)."""
    from crosstune.run.lora_weights import read_peft_adapter

    common = (
        "train.warmup_steps=0",
        "train.schedule=constant",  # a cosine over max_steps would differ between a 2-step run and its resume to 4
        "train.learning_rate=3e-3",
        "train.checkpoint_every=2",
        "train.keep_last=3",
    )
    _train(_recipe(fixtures, tmp_path / "a", "train.max_steps=4", *common), tmp_path / "whole")
    _train(_recipe(fixtures, tmp_path / "b", "train.max_steps=2", *common), tmp_path / "split")
    _train(_recipe(fixtures, tmp_path / "b", "train.max_steps=4", *common), tmp_path / "split", resume=True)
    whole, _ = read_peft_adapter(tmp_path / "whole" / "adapter")
    split, _ = read_peft_adapter(tmp_path / "split" / "adapter")
    assert whole.modules.keys() == split.modules.keys()
    for name, (a, b) in whole.modules.items():
        for x, y in zip((a, b), split.modules[name], strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6 * float(np.abs(x).max() + 1e-12), err_msg=name)


def test_the_chip_s_loss_equals_the_cpu_s_under_the_highest_matmul_precision(chip, fixtures, tmp_path):
    """One fp32 forward of the tiny model on the chip and on the host's CPU, same weights and rows: with
    `highest` the chip's matmuls are fp32 (by default they are bf16 passes: 1.3e-4 relative off on this loss); what
    remains is its transcendentals (exp, log, tanh in GELU and the softcap), which agree with the CPU's libm to
    4-5 digits, a few per token and layer: 1e-4 relative."""
    import jax

    from crosstune.train.jax.loss import loss_fn
    from crosstune.train.jax.measure import synthetic_batch
    from crosstune.train.jax.model import build_model, mesh_context

    recipe = _recipe(fixtures, tmp_path, "train.precision=fp32")
    losses = {}
    for platform in ("tpu", "cpu"):
        with jax.default_device(jax.devices(platform)[0]), jax.default_matmul_precision("highest"):
            mesh = jax.sharding.Mesh(np.array(jax.devices(platform)[:1]).reshape(1, 1), ("fsdp", "tp"))
            with mesh_context(mesh):
                model, _ = build_model("gemma4", fixtures / "model", mesh, lora=recipe.lora, compute_dtype="float32")
                batch = synthetic_batch(2, 256, 1024, 1, seed=3)
                inputs = {k: jax.device_put(v, jax.devices(platform)[0]) for k, v in batch.items()}
                losses[platform] = float(loss_fn(model, **inputs))
    assert abs(losses["tpu"] - losses["cpu"]) <= 1e-4 * abs(losses["cpu"]), losses


def test_the_peak_memory_metric_is_xla_s_analysis_of_the_step(chip):
    """`plan --run`'s peak (live arrays + what the step reserved: progress.device_peak_bytes, the metric
    `peak_memory_gib` reads) against XLA's memory_analysis of the same compiled step, at the 31B's dimensions (one
    layer, 2048 tokens). XLA's figure is its plan of the program's buffers; the runtime reserved 0.5-2.7 % less on
    every shape measured on the v5e (docs/BENCHMARKS.md, "The planner against the chip"; 2.6 % here), never more. So:
    at most the plan plus 1 % (the runtime's own buffers, the filler programs' outputs), at least 96 % of it (a
    metric that left out the temporaries, as peak_bytes_in_use alone does, reads ~60 % of it here)."""
    from crosstune.planner.planned_recipe import load_for_plan
    from crosstune.train.parts import measure_step
    from tests.helpers.paths import REPO

    sets = ["hardware=auto", "data.max_seq_len=2048", "backend.jax.scan_layers=false"]  # as measured on the chip
    recipe = load_for_plan(REPO / "recipes" / "gemma4-31b-tpu-v5p-8.yaml", sets)
    got = measure_step(recipe, 1, steps=2, warmup=1)
    xla = (
        got["xla_argument_bytes"]
        + got["xla_output_bytes"]
        - got["xla_alias_bytes"]
        + got["xla_temp_bytes"]
        + got["xla_code_bytes"]
    )
    assert 0.96 * xla <= got["peak_bytes"] <= 1.01 * xla, (got["peak_bytes"], xla, got["peak_in_use_bytes"])
