"""The ahead-of-time compile builds the very program training runs, and the CPU compute dtype is the recipe's (that
the step holds the frozen base once is checked on a training run: tests/train/jax/test_train.py)."""

from __future__ import annotations

import pytest

from tests.helpers.jax_recipes import tiny_recipe

pytest.importorskip("tunix")


def test_the_ahead_of_time_step_is_the_training_step(tiny_gemma4_dir, synth_corpus_dir, tmp_path):
    """crosstune.train.jax.aot builds from the config alone (no weights) the program the trainer runs: the same
    StableHLO, given the same mesh, shapes, shardings and schedule length — the block-LoRA widths included — and
    the recipe's XLA options (crosstune.train.jax.xla_options)."""
    import jax
    from flax import nnx

    from crosstune.model_configs import read_model_config
    from crosstune.train.jax.aot import abstract_step
    from crosstune.train.jax.lora import param_name
    from crosstune.train.jax.model import mesh_context
    from crosstune.train.session import TrainingSession

    recipe = tiny_recipe(
        tiny_gemma4_dir,
        synth_corpus_dir,
        tmp_path,
        "gemma4",
        "backend.jax.mesh.fsdp=2",
        "backend.jax.mesh.tp=2",
        "train.max_steps=3",
        "train.grad_accumulation=2",
        "train.per_device_batch_size=2",
        "lora.dropout=0.05",
        "train.gradient_checkpointing=true",
        "backend.jax.cpu_compute_dtype=bfloat16",
        "backend.jax.scoped_vmem_kib=98304",  # a TPU option: both trainers carry it, XLA:CPU gets none
    )
    session = TrainingSession(recipe, "jax", tmp_path / "run", progress=False)
    with session.started() as backend:
        real = backend.run
        assert real.settings.compute_dtype == "bfloat16" and real.facts().precision == "bf16"  # the recipe's, on CPU
        batch = next(real.micro_batches(0))
        with mesh_context(real.mesh):
            trained = real.trainer.held_once_step().lower(real.trainer.model, real.trainer.optimizer, batch)
        cfg = read_model_config(tiny_gemma4_dir)
        step, trainer, inputs, tokens, k = abstract_step(recipe, cfg, real.mesh, platform="cpu", total_steps=3)
        with mesh_context(real.mesh):
            compiled_ahead = step.lower(trainer.model, trainer.optimizer, inputs)
        assert (tokens, k) == (4 * 512, 2)
        assert real.trainer.scoped_vmem_kib == trainer.scoped_vmem_kib == 98304

        def lora_shapes(model):
            leaves = jax.tree_util.tree_leaves_with_path(nnx.state(model, nnx.LoRAParam))
            return {param_name(p): (x.shape, x.dtype) for p, x in leaves}

        shapes = lora_shapes(trainer.model)
        assert shapes == lora_shapes(real.trainer.model)
        assert shapes["layers.0.attn.kv_einsum.w_lora_a"][0][-1] == 16  # k and v: the block LoRA of width 2r
        assert compiled_ahead.as_text() == trained.as_text()


def test_cpu_compute_dtype_is_the_recipe_s(tiny_gemma4_dir, synth_corpus_dir, tmp_path):
    """On CPU the activations are float32 unless backend.jax.cpu_compute_dtype says bfloat16 (halving activation
    and logit memory for a real-size rehearsal); the base weights keep model.dtype either way."""
    import jax.numpy as jnp
    from flax import nnx

    from crosstune.train.jax.config import compute_dtype
    from crosstune.train.jax.loss import attention_mask
    from crosstune.train.jax.model import build_model, make_mesh, mesh_context

    default = tiny_recipe(tiny_gemma4_dir, synth_corpus_dir, tmp_path, "gemma4")
    assert default.backend.jax.cpu_compute_dtype == "float32" and compute_dtype(default, "cpu") == "float32"
    bf16 = tiny_recipe(tiny_gemma4_dir, synth_corpus_dir, tmp_path, "gemma4", "backend.jax.cpu_compute_dtype=bfloat16")
    assert compute_dtype(bf16, "cpu") == "bfloat16"
    assert compute_dtype(bf16, "tpu") == "float32"  # accelerators follow train.precision (fp32 in this recipe)
    mesh = make_mesh(1, 1)
    tokens = jnp.arange(8, dtype=jnp.int32)[None] % 1000
    positions, segments = jnp.arange(8)[None], jnp.ones((1, 8), jnp.int32)
    programs = {}
    for name in ("float32", "bfloat16"):
        with mesh_context(mesh):
            model, _ = build_model("gemma4", tiny_gemma4_dir, mesh, dtype="float32", compute_dtype=name)
            forward = nnx.jit(lambda m: m(tokens, positions, None, attention_mask(segments))[0])
            programs[name] = forward.lower(model).as_text()
        assert model.embedder.input_embedding.value.dtype == jnp.float32  # weights: model.dtype
    lm_head = "-> tensor<1x8x1024xbf16>"  # the vocabulary projection's result (tunix casts the logits to f32 after)
    assert lm_head in programs["bfloat16"] and lm_head not in programs["float32"]
