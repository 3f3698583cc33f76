"""Tunix's own LoRA loop as its examples write it, at a recipe's shape, for bench/ to time crosstune's step against on
the same chip in the same process: PeftTrainer with its default loss (full logits) and its own jitted step
(`nnx.jit`, the optimizer donated), Qwix's LoraProvider on the seven targets (LoRA weights in the base's dtype, as
Qwix makes them), tunix's attention over a causal [B, L, L] mask, nothing recomputed, optax.adamw, MultiSteps over
the recipe's accumulation. Weights are made on the devices as crosstune.train.jax.measure makes them.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from crosstune.families import get_family
from crosstune.recipe import Recipe
from crosstune.train.jax.measure import _say, fill, synthetic_batch


def measure_plain_tunix(
    recipe: Recipe, layers: int | None = None, *, steps: int = 8, warmup: int = 2, say: Callable[[str], None] = _say
) -> dict:
    """Build, fill and time the plain Tunix loop's micro-step (module docstring); the first call (tracing and XLA's
    compile included) is reported apart."""
    import jax
    import jax.numpy as jnp
    from tunix.sft import peft_trainer

    from crosstune.train.jax.model import make_mesh, mesh_context
    from crosstune.train.jax.progress import device_peak_bytes
    from crosstune.train.step_plan import accumulation

    r = recipe
    mesh = make_mesh(r.backend.jax.mesh.fsdp, r.backend.jax.mesh.tp)
    k = accumulation(r.train, r.backend.jax.mesh.fsdp)
    t0 = time.perf_counter()
    with mesh_context(mesh):
        train_step, spec = _plain_step(r, layers, mesh, k, say)
        rows = r.train.per_device_batch_size * r.backend.jax.mesh.fsdp
        host = synthetic_batch(rows, r.data.max_seq_len, spec.vocab_size, k, r.train.seed)
        rows_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("fsdp"))
        inputs = peft_trainer.TrainingInput(
            input_tokens=jax.device_put(host["input_tokens"], rows_sharding),
            input_mask=jax.device_put(jnp.asarray(host["input_mask"]), rows_sharding),
        )
        t1 = time.perf_counter()
        say(f"[plain tunix] first step: tracing and XLA's compile ({t1 - t0:.0f} s so far)")
        jax.block_until_ready(train_step(inputs))
        t2 = time.perf_counter()
        times = []
        for i in range(warmup + steps):
            start = time.perf_counter()
            jax.block_until_ready(train_step(inputs))
            if i >= warmup:
                times.append(time.perf_counter() - start)
    peaks = [device_peak_bytes(d.memory_stats() or {}) for d in jax.local_devices()]
    return {
        "recipe": r.name,
        "layers": spec.num_layers,
        "micro_batch_tokens": rows * r.data.max_seq_len,
        "build_s": t1 - t0,
        "first_step_s": t2 - t1,
        "step_times_s": times,
        "median_s": statistics.median(times),
        "peak_bytes": max((p for p in peaks if p is not None), default=None),
    }


def _plain_step(r: Recipe, layers: int | None, mesh, k: int, say: Callable[[str], None]):
    """(Tunix's own jitted train step of a PeftTrainer over the recipe's model with Qwix LoRA, made on the devices,
    the model's spec), inside the mesh context."""
    import jax
    import optax
    import qwix
    from flax import nnx
    from tunix.generate import utils as tunix_utils
    from tunix.sft import peft_trainer

    from crosstune.families.tunix_config import tunix_model_class, tunix_model_config
    from crosstune.train.jax.aot import hf_config
    from crosstune.train.jax.model import lora_module_regex

    cfg = hf_config(r, layers)
    spec = get_family(r.model.family).spec_from_hf_config(cfg)
    say(f"[plain tunix] building {r.name}: {spec.num_layers} layers, {r.data.max_seq_len} tokens per row")
    config = tunix_model_config(r.model.family, cfg, dtype=r.model.dtype, compute_dtype=r.model.dtype)
    rule = qwix.LoraProvider(
        module_path=lora_module_regex(r.model.family, spec, list(r.lora.targets)),
        rank=r.lora.rank,
        alpha=float(r.lora.alpha),
        dropout=r.lora.dropout,
    )
    model = nnx.eval_shape(lambda: tunix_model_class(r.model.family)(config, rngs=nnx.Rngs(params=0)))
    model = nnx.eval_shape(
        lambda m: qwix.apply_lora_to_model(m, rule, rngs=nnx.Rngs(params=0, dropout=0), **m.get_model_input()),
        model,
    )
    state = nnx.state(model)
    shardings = nnx.get_named_sharding(state, mesh)
    abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, shardings)
    nnx.update(model, fill(abstract, seed=r.train.seed))
    if r.lora.dropout > 0:
        model.set_attributes(qwix_rngs=nnx.Rngs(dropout=r.train.seed))
    tx = optax.adamw(r.train.learning_rate, weight_decay=r.train.weight_decay)
    config = peft_trainer.TrainingConfig(
        eval_every_n_steps=sys.maxsize, max_steps=None, gradient_accumulation_steps=k if k > 1 else None
    )
    trainer = peft_trainer.PeftTrainer(model, tx, config)

    def model_input(batch: peft_trainer.TrainingInput) -> dict:
        every = batch.input_tokens != -1
        return {
            "input_tokens": batch.input_tokens,
            "input_mask": batch.input_mask,
            "positions": tunix_utils.build_positions_from_mask(every),
            "attention_mask": tunix_utils.make_causal_attn_mask(every, batch.input_tokens.shape[1]),
        }

    trainer.with_gen_model_input_fn(model_input)
    train_step, _ = trainer.jit_train_and_eval_step()
    return train_step, spec
