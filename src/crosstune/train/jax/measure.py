"""The recipe's jax step run and timed on the devices this process sees (`crosstune plan --run`): the same step
`crosstune train` runs (crosstune.train.jax.aot's abstract step: tunix model + Qwix LoRA + crosstune's optimizer in
MultiSteps, HeldOnceStep) at the model's true dimensions, cut to its first `layers` decoder layers when asked,
with weights made on the devices (one jitted program writes every tensor in its own sharding: nothing is read or
sent from the host) and one synthetic packed micro-batch of the recipe's shape.

Timed: XLA's compile (lower + compile, apart; from the abstract arguments, before the weights are made, so a step
XLA refuses costs no fill), then `warmup` micro-steps, then `steps` micro-steps each waited for (block_until_ready),
so each time is the step's own. Memory: the devices' peak (live arrays + what programs reserved for their
temporaries: crosstune.train.jax.progress.device_peak_bytes) beside XLA's memory_analysis.
The numbers a synthetic batch changes nothing of: every position of every row is computed, splash skips blocks by
the causal/local mask alone, and the loss's values don't touch the speed.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from crosstune.families import get_family
from crosstune.recipe import Recipe

# `plan --run`'s compiled steps, reused by the next run of the same shape ($JAX_COMPILATION_CACHE_DIR where set)
COMPILE_CACHE = Path.home() / ".cache" / "crosstune" / "xla"
DOCUMENT_TOKENS = 512  # the synthetic rows' document length: packed rows of documents, segment ids as packing gives


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fill(abstract, zero: bool = False, seed: int = 0):
    """Every leaf of `abstract` (ShapeDtypeStructs carrying their shardings) made on its devices: floats spread over
    ±0.02 (a sine of the element's index), or 0 with `zero` (optimizer state); integers 0; PRNG keys from `seed`.
    One small program per distinct (shape, dtype, sharding), compiled once and reused by every layer."""
    import jax
    import jax.numpy as jnp

    leaves, treedef = jax.tree.flatten(abstract)
    made = []
    for i, leaf in enumerate(leaves):
        key = jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)
        made.append(_filler(leaf.shape, leaf.dtype, leaf.sharding, zero, seed + i if key else 0)())
    return jax.tree.unflatten(treedef, made)


@functools.cache
def _filler(shape, dtype, sharding, zero: bool, seed: int):
    import jax
    import jax.numpy as jnp

    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
        return jax.jit(
            lambda: jax.random.split(jax.random.key(seed), shape) if shape else jax.random.key(seed),
            out_shardings=sharding,
        )
    if zero or not jnp.issubdtype(dtype, jnp.floating):
        return jax.jit(lambda: jnp.zeros(shape, dtype), out_shardings=sharding)

    def sine():
        index = jax.lax.broadcasted_iota(jnp.float32, shape, len(shape) - 1) if shape else jnp.float32(0)
        for axis in range(len(shape) - 1):
            index = index * 1.618034 + jax.lax.broadcasted_iota(jnp.float32, shape, axis)
        return (0.02 * jnp.sin(index * 12.9898)).astype(dtype)

    return jax.jit(sine, out_shardings=sharding)


def synthetic_batch(rows: int, length: int, vocab: int, accumulation: int, seed: int = 0) -> dict[str, np.ndarray]:
    """One packed micro-batch: documents of DOCUMENT_TOKENS tokens (the last one cut at the row's end), random
    tokens, positions restarting per document, every token trained but each document's first, and the loss weight
    k / N that crosstune.train.jax.batches gives a step of `accumulation` such micro-batches."""
    rng = np.random.default_rng(seed)
    index = np.arange(length)
    segment = (index // DOCUMENT_TOKENS + 1).astype(np.int32)
    positions = (index % DOCUMENT_TOKENS).astype(np.int32)
    batch = {
        "input_tokens": rng.integers(0, vocab, (rows, length), dtype=np.int32),
        "input_mask": np.broadcast_to(positions > 0, (rows, length)).copy(),
        "positions": np.broadcast_to(positions, (rows, length)).copy(),
        "segment_ids": np.broadcast_to(segment, (rows, length)).copy(),
    }
    trained = int(np.count_nonzero(batch["input_mask"][:, 1:])) * accumulation
    batch["loss_weight"] = np.full(rows, accumulation / trained, np.float32)
    return batch


def measure_step(
    recipe: Recipe,
    layers: int | None = None,
    *,
    steps: int = 8,
    warmup: int = 2,
    profile_dir: Path | None = None,
    say: Callable[[str], None] = _say,
    lora_provider: str = "crosstune",
) -> dict:
    """Build, fill, compile and time the recipe's micro-step on the attached devices: the fields of
    crosstune.planner.measured.MeasuredStep (`lora_provider` "qwix": Qwix's own LoRA branch, a benchmark's
    baseline)."""
    import jax

    from crosstune.train.jax.aot import abstract_step, compile_lowered, hf_config
    from crosstune.train.jax.config import use_compile_cache
    from crosstune.train.jax.model import make_mesh, mesh_context

    use_compile_cache(COMPILE_CACHE)
    fam = get_family(recipe.model.family)
    model_layers = fam.spec_from_hf_config(hf_config(recipe, None)).num_layers
    cfg = hf_config(recipe, layers)
    spec = fam.spec_from_hf_config(cfg)
    m = recipe.backend.jax.mesh
    devices = jax.devices()
    mesh = make_mesh(m.fsdp, m.tp)
    platform = devices[0].platform
    t0 = time.perf_counter()
    say(
        f"[1/4] building {recipe.name}'s step: {spec.num_layers} of {model_layers} layers on {m.fsdp}×{m.tp} "
        f"{devices[0].device_kind}"
    )
    step, trainer, abstract_inputs, tokens, k = abstract_step(
        recipe, cfg, mesh, platform=platform, lora_provider=lora_provider
    )
    with mesh_context(mesh):
        frozen, rest, opt_state, _ = step.split_args(trainer.model, trainer.optimizer, abstract_inputs)
        t1 = time.perf_counter()
        # compiled from the abstract arguments, before any weight is made: a step XLA refuses fails first
        say(f"[2/4] lowering and compiling ({t1 - t0:.0f} s so far)")
        lowered = step.jitted_fn.lower(frozen, rest, opt_state, abstract_inputs)
        t2 = time.perf_counter()
        compiled = compile_lowered(lowered, f"{recipe.name}'s step at {spec.num_layers} layers")
        t3 = time.perf_counter()
        say(f"[3/4] making the weights on the devices (compiled in {t3 - t2:.0f} s)")
        frozen, rest = fill((frozen, rest), seed=recipe.train.seed)
        opt_state = fill(opt_state, zero=True)
        jax.block_until_ready((frozen, rest, opt_state))
        host = synthetic_batch(*next(iter(abstract_inputs.values())).shape, spec.vocab_size, k, recipe.train.seed)
        inputs = {name: jax.device_put(host[name], abstract_inputs[name].sharding) for name in abstract_inputs}
        t4 = time.perf_counter()
        say(f"[4/4] {warmup} + {steps} micro-steps ({t4 - t0:.0f} s so far)")
        times, losses = timed_steps(compiled, (frozen, rest, opt_state), inputs, warmup, steps, profile_dir)
    return {
        **_memory_and_cost(compiled),
        "recipe": recipe.name,
        "hardware": recipe.hardware,
        "device_kind": devices[0].device_kind,
        "devices": m.fsdp * m.tp,
        "layers": spec.num_layers,
        "model_layers": model_layers,
        "micro_batch_tokens": tokens,
        "accumulation": k,
        "build_s": t1 - t0,
        "lower_s": t2 - t1,
        "compile_s": t3 - t2,
        "fill_s": t4 - t3,
        "step_times_s": times,
        "median_s": statistics.median(times),
        "losses": losses,
    }


def timed_steps(compiled, state: tuple, inputs: dict, warmup: int, steps: int, profile_dir: Path | None):
    """(seconds of each of `steps` micro-steps after `warmup`, every step's loss): the compiled HeldOnceStep run on
    (frozen, rest, optimizer state), the donated state fed back; one step traced into `profile_dir` when given."""
    import jax

    frozen, rest, opt_state = state
    times, losses = [], []
    for i in range(warmup + steps):
        if profile_dir is not None and i == warmup:
            jax.profiler.start_trace(str(profile_dir))
        start = time.perf_counter()
        out, rest, opt_state = compiled(frozen, rest, opt_state, inputs)
        jax.block_until_ready((out, rest, opt_state))
        if i >= warmup:
            times.append(time.perf_counter() - start)
        losses.append(float(jax.device_get(out[0])))
        if profile_dir is not None and i == warmup:
            jax.profiler.stop_trace()  # one step: its trace stays a few MB
    return times, losses


def _memory_and_cost(compiled) -> dict:
    """The devices' peaks (crosstune.train.jax.progress.device_peak_bytes) and XLA's analyses of `compiled`."""
    import jax

    from crosstune.train.jax.progress import device_peak_bytes

    stats = [d.memory_stats() or {} for d in jax.local_devices()]
    mem, cost = compiled.memory_analysis(), compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    peaks = [device_peak_bytes(s) for s in stats]
    return {
        "peak_bytes": max((p for p in peaks if p is not None), default=None),
        "peak_in_use_bytes": max((int(s.get("peak_bytes_in_use", 0)) for s in stats), default=None),
        "bytes_limit": min((int(s["bytes_limit"]) for s in stats if "bytes_limit" in s), default=None),
        "xla_argument_bytes": int(mem.argument_size_in_bytes),
        "xla_output_bytes": int(mem.output_size_in_bytes),
        "xla_alias_bytes": int(mem.alias_size_in_bytes),
        "xla_temp_bytes": int(mem.temp_size_in_bytes),
        "xla_code_bytes": int(mem.generated_code_size_in_bytes),
        "xla_peak_bytes": int(getattr(mem, "peak_memory_in_bytes", 0) or 0),
        "flops": float(cost.get("flops", 0.0)),
        "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
    }
