"""Compile a recipe's real train step for its TPU topology on a machine without a TPU (`crosstune plan --compile`
starts this module in a process of its own, with libtpu on its path: crosstune.train.jax.aot_process).

The same code path `crosstune train --backend jax` runs, built abstractly: the tunix model of the family's config
(model.path's config.json, else model.size) with Qwix LoRA, the run's block-LoRA shapes, remat, the recipe's
(fsdp, tp) mesh over the topology's devices, crosstune's optimizer in tunix's MultiSteps, the trainer's own step
(HeldOnceStep over tunix's step body) and one micro-batch of per_device_batch_size × fsdp rows × max_seq_len.
Every leaf is a ShapeDtypeStruct with its NamedSharding: no weight is read or allocated. XLA's memory_analysis and
cost_analysis of the compiled step go to a JSON file; progress goes to stderr.

    python -m crosstune.train.jax.aot RECIPE [--set k=v ...] [--layers N] --out FILE
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from crosstune.errors import CrosstuneError
from crosstune.families import get_family
from crosstune.hardware import HARDWARE
from crosstune.hub import HubError
from crosstune.model_configs import decoder_config, read_model_config
from crosstune.planner.aot_report import with_layers
from crosstune.planner.hlo import parse_collectives
from crosstune.planner.loops import loop_work
from crosstune.planner.planned_recipe import load_for_plan
from crosstune.recipe import Recipe, model_path
from crosstune.run.metrics import host_peak_rss_bytes
from crosstune.train.step_plan import accumulation
from crosstune.units import bytes_to_gib

NOMINAL_STEPS = 1000  # the schedule's length only sets constants in the program: sizes and costs don't depend on it


class CompileError(CrosstuneError):
    """The step could not be built or compiled for the topology; the message says where."""


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def hf_config(recipe: Recipe, layers: int | None) -> dict:
    """The model's HF config (model.path's config.json, else the family's for model.size), cut to its first
    `layers` decoder layers."""
    fam = get_family(recipe.model.family)
    try:
        path = model_path(recipe, fetch=False)  # a hub id's cached config: a compile never downloads
    except HubError:
        if not recipe.model.size:
            raise
        path = None
    if path is not None and (path / "config.json").is_file():
        cfg = read_model_config(path)
        spec = fam.spec_from_hf_config(cfg)
    elif recipe.model.size:
        spec = fam.spec(recipe.model.size)
        cfg = fam.hf_config(spec)
    else:
        raise CompileError(f"model.path has no config.json ({path}) and model.size is not set: nothing to compile")
    if layers is None:
        return cfg
    try:
        short = with_layers(spec, layers)  # checks the range
    except ValueError as e:
        raise CompileError(str(e)) from None
    text = dict(decoder_config(cfg))
    text["num_hidden_layers"] = layers
    text["layer_types"] = list(text["layer_types"])[:layers]
    if "num_kv_shared_layers" in text:
        text["num_kv_shared_layers"] = short.kv_shared_layers
    return {**cfg, "text_config": text} if "text_config" in cfg else text


def topology_mesh(recipe: Recipe):
    """The recipe's (fsdp, tp) mesh over the devices of its hardware's TPU topology (compile-only devices)."""
    import jax
    from jax.experimental import topologies
    from jax.sharding import AxisType

    from crosstune.train.jax.model import AXES

    hw = HARDWARE[recipe.hardware]
    if hw.tpu_topology is None:
        tpus = ", ".join(h.name for h in HARDWARE.values() if h.tpu_topology)
        raise CompileError(f"hardware {hw.name}: --compile compiles for TPU topologies only ({tpus})")
    name, bounds = hw.tpu_topology
    topo = topologies.get_topology_desc(
        platform="tpu", topology_name=name, chips_per_host_bounds=bounds, chip_config_name="default", num_slices=1
    )
    m = recipe.backend.jax.mesh
    if m.fsdp * m.tp != len(topo.devices):
        raise CompileError(f"mesh fsdp×tp = {m.fsdp}×{m.tp}, but {name} has {len(topo.devices)} devices")
    mesh = jax.make_mesh((m.fsdp, m.tp), AXES, axis_types=(AxisType.Auto,) * 2, devices=topo.devices)
    return name, topo.devices[0].device_kind, mesh


def abstract_step(
    recipe: Recipe,
    cfg: dict,
    mesh,
    *,
    platform: str = "tpu",
    total_steps: int = NOMINAL_STEPS,
    lora_provider: str = "crosstune",
):
    """(the trainer's HeldOnceStep, the abstract trainer, abstract inputs, tokens per micro-step, accumulation) for
    the recipe on `mesh`, compute dtype as on `platform` (`lora_provider`: crosstune.train.jax.config's)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec

    from crosstune.train.jax.config import ModelSettings
    from crosstune.train.jax.lora import widen_block_lora
    from crosstune.train.jax.loss import loss_fn, model_inputs
    from crosstune.train.jax.model import abstract_model, mesh_context
    from crosstune.train.jax.optimizer import make_optimizer
    from crosstune.train.jax.trainer import abstract_trainer, training_config

    r = recipe
    fam = get_family(r.model.family)
    settings = ModelSettings.of(r, platform).replace(lora_provider=lora_provider)
    model, _ = abstract_model(r.model.family, cfg, mesh, platform=platform, **settings.kwargs())
    widen_block_lora(model, fam.spec_from_hf_config(cfg), r.lora.targets, r.lora.rank)
    if r.lora.dropout > 0:
        model.set_attributes(qwix_rngs=nnx.Rngs(dropout=r.train.seed))  # as build_model does
    if settings.scan_layers:
        from crosstune.train.jax.layer_scan import stack_layers

        stack_layers(model, mesh)  # as the run's worker does, last
    k = accumulation(r.train, r.backend.jax.mesh.fsdp)
    tx, _ = make_optimizer(r.train, total_steps, lora_rank=r.lora.rank)
    with mesh_context(mesh):
        trainer = abstract_trainer(model, tx, training_config(k, total_steps))
        trainer.with_loss_fn(loss_fn).with_gen_model_input_fn(model_inputs)
        trainer.scoped_vmem_kib = r.backend.jax.scoped_vmem_kib
        for obj in (trainer.model, trainer.optimizer):  # every leaf: shape, dtype and its NamedSharding
            state = nnx.state(obj)
            sds = jax.tree.map(
                lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                state,
                nnx.get_named_sharding(state, mesh),
            )
            nnx.update(obj, sds)
        step = trainer.held_once_step()
    rows, length = r.train.per_device_batch_size * r.backend.jax.mesh.fsdp, r.data.max_seq_len
    rows_sharding = NamedSharding(mesh, PartitionSpec("fsdp"))
    dtypes = {"input_tokens": jnp.int32, "input_mask": jnp.bool_, "positions": jnp.int32, "segment_ids": jnp.int32}
    inputs = {k: jax.ShapeDtypeStruct((rows, length), d, sharding=rows_sharding) for k, d in dtypes.items()}
    inputs["loss_weight"] = jax.ShapeDtypeStruct((rows,), jnp.float32, sharding=rows_sharding)
    return step, trainer, inputs, rows * length, k


class _Ticker:
    """A line on stderr every `every` seconds while XLA compiles (one call that gives no progress of its own)."""

    def __init__(self, what: str, every: float = 30.0) -> None:
        self.what, self.every, self._stop = what, every, threading.Event()

    def __enter__(self) -> _Ticker:
        self.t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            rss = bytes_to_gib(host_peak_rss_bytes())
            _say(f"  … {self.what}: {time.perf_counter() - self.t0:.0f} s (host peak RSS {rss:.1f} GiB)")

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def compile_lowered(lowered, what: str):
    """`lowered.compile()`; XLA's refusal of a program its devices can't hold is the user's to act on (TrainError)."""
    import jax

    from crosstune.train.backend import TrainError

    try:
        return lowered.compile()
    except jax.errors.JaxRuntimeError as e:
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        reason = str(e).split("RESOURCE_EXHAUSTED: ", 1)[-1].splitlines()[0]
        raise TrainError(
            f"{what} does not fit the devices: {reason} (XLA): try fewer --layers, or recompute activations "
            "(train.gradient_checkpointing: true)"
        ) from None


def xla_cost(module_text: str) -> tuple[float, float]:
    """(flops, bytes accessed) of an HLO module's text by XLA's own cost analysis: the CPU client's, which jaxlib
    exposes (the compile-only TPU client has none) and which gives a TPU program's figures (crosstune.planner.loops).
    jaxlib's bindings (hlo_module_from_text, hlo_module_cost_analysis) have no public jax API: jax is pinned."""
    import jax
    from jax._src.lib import hlo, xla_client

    module = hlo.hlo_module_from_text(module_text)
    found = xla_client._xla.hlo_module_cost_analysis(jax.devices("cpu")[0].client, module)
    return float(found.get("flops", 0.0)), float(found.get("bytes accessed", 0.0))


def xla_work(compiled, text: str) -> dict:
    """The compiled program's flops and bytes accessed per device, CompiledStep's fields: XLA's cost_analysis (each
    while loop's body once) and its loops' later runs (crosstune.planner.loops); `text` is `compiled.as_text()`."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    loops = loop_work(text, xla_cost)
    return {
        "flops": float(cost.get("flops", 0.0)),
        "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
        "loop_flops": loops.flops,
        "loop_bytes": loops.bytes,
        "loops_counted": True,
        "uncounted_loops": loops.uncounted,
    }


def compile_recipe(recipe: Recipe, layers: int | None) -> dict:
    """Build, lower and compile the recipe's step for its topology: the fields of planner.aot_report.CompiledStep."""
    from crosstune.train.jax.model import mesh_context

    fam = get_family(recipe.model.family)
    model_layers = fam.spec_from_hf_config(hf_config(recipe, None)).num_layers
    cfg = hf_config(recipe, layers)
    compiled_layers = fam.spec_from_hf_config(cfg).num_layers
    t0 = time.perf_counter()
    topology, kind, mesh = topology_mesh(recipe)
    _say(f"[1/3] building the abstract step: {recipe.name}, {compiled_layers} of {model_layers} layers, {topology}")
    step, trainer, inputs, tokens, k = abstract_step(recipe, cfg, mesh)
    t1 = time.perf_counter()
    _say(f"[2/3] lowering to StableHLO ({t1 - t0:.0f} s so far)")
    with mesh_context(mesh), _Ticker("lowering"):
        lowered = step.lower(trainer.model, trainer.optimizer, inputs)
    t2 = time.perf_counter()
    _say(
        f"[3/3] XLA compiling for {kind} × {len(mesh.devices.flat)} ({t2 - t0:.0f} s so far; the full 31B: "
        "~6 min, ~1.5 scanned)"
    )
    with _Ticker("compiling"):
        compiled = compile_lowered(lowered, f"{recipe.name}'s step at {compiled_layers} layers on {topology}")
    t3 = time.perf_counter()
    _say(
        f"compiled in {t3 - t0:.0f} s (host peak RSS {bytes_to_gib(host_peak_rss_bytes()):.1f} GiB); reading XLA's "
        "analyses of it (each loop's body costed apart)"
    )
    mem = compiled.memory_analysis()
    from crosstune.train.jax.attention import kernel_work

    devices = len(mesh.devices.flat)
    text = compiled.as_text()
    collectives = parse_collectives(text, devices)
    kernels = kernel_work(recipe, fam.spec_from_hf_config(cfg), collectives.custom_calls, mesh)
    work = xla_work(compiled, text)
    _say(f"  … read in {time.perf_counter() - t3:.0f} s")
    return {
        "topology": topology,
        "device_kind": kind,
        "devices": devices,
        "layers": compiled_layers,
        "model_layers": model_layers,
        "micro_batch_tokens": tokens,
        "accumulation": k,
        "argument_bytes": int(mem.argument_size_in_bytes),
        "output_bytes": int(mem.output_size_in_bytes),
        "alias_bytes": int(mem.alias_size_in_bytes),
        "temp_bytes": int(mem.temp_size_in_bytes),
        "peak_bytes": int(getattr(mem, "peak_memory_in_bytes", 0) or 0),
        "generated_code_bytes": int(mem.generated_code_size_in_bytes),
        **work,
        "build_s": t1 - t0,
        "lower_s": t2 - t1,
        "compile_s": t3 - t2,
        "host_peak_rss_bytes": host_peak_rss_bytes(),
        "collective_bytes": collectives.total_bytes,
        "collectives": collectives.as_dict(),
        "kernel_flops": kernels.flops,
        "kernel_bytes": kernels.bytes,
        "kernel_note": kernels.note,
        "scanned": bool(recipe.backend.jax.scan_layers),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crosstune.train.jax.aot", description=__doc__.splitlines()[0])
    parser.add_argument("recipe", type=Path)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        result = compile_recipe(load_for_plan(args.recipe, args.overrides), args.layers)
    except CrosstuneError as e:
        _say(f"error: {e}")
        return 1
    args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
