"""One jax training process (every process of a multi-host run runs one): Tunix PeftTrainer + Qwix LoRA + Optax
AdamW + Orbax checkpoints + Grain input, on a (fsdp, tp) mesh, for the session's RunContext.

    context ─► plan check (heads vs tp, devices, memory) ─► mesh ─► tunix model from HF safetensors, sharded,
            + Qwix LoRA ─► PeftTrainer (AdamW, token-weighted loss) ─► metrics.jsonl + TensorBoard
            ─► <run>/checkpoints/<step>/ (LoRA params + optimizer state; the data position is the step count)
            ─► run.json's compile and checkpoint seconds (the session wrote the rest, with `facts()`)
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from crosstune.planner import plan_recipe
from crosstune.recipe import model_path
from crosstune.run.integrity import record_checksums, verify_saved
from crosstune.run.layout import CHECKPOINTS, XLA_CACHE, saved_steps, step_folders
from crosstune.run.lora_weights import LoraWeights
from crosstune.run.metrics import MetricsWriter
from crosstune.run.records import Mesh, RunTimings, StackFacts
from crosstune.train.backend import FitResult, RunContext, TrainError
from crosstune.train.jax.data import global_batch, global_sum, train_dataset
from crosstune.train.jax.lora import param_name, qwix_to_lora
from crosstune.train.progress_bar import ProgressBar
from crosstune.units import MIB


class JaxRun:
    """One training run on the session's data and step plan, in two halves so tests can look at the trainer
    between them: `with run.setup(): run.fit()` (setup enters the mesh context; the trainer lives inside it)."""

    def __init__(self, context: RunContext):
        import jax

        self.context, self.recipe, self.run_dir = context, context.recipe, context.run_dir
        self.step_plan, self.prepared, self.spec = context.plan, context.prepared, context.spec
        self.progress = context.progress and jax.process_index() == 0
        self.counts: dict[int, tuple[int, int, int]] = {}  # step -> (trained, real, computed tokens), as read

    @contextlib.contextmanager
    def setup(self) -> Iterator[JaxRun]:
        """Check the plan, build mesh, data loader, model + LoRA and the trainer, and stay inside the mesh context."""
        import jax

        from crosstune.train.jax.config import ModelSettings, use_compile_cache
        from crosstune.train.jax.model import make_mesh, mesh_context
        from crosstune.train.jax.optimizer import make_optimizer, schedule_values

        r = self.recipe
        plan = plan_recipe(r, backend="jax", spec=self.spec)
        if not plan.ok:
            raise TrainError(f"the plan can't run on {r.hardware}: " + "; ".join(plan.blockers))
        fsdp, tp = r.backend.jax.mesh.fsdp, r.backend.jax.mesh.tp
        if jax.device_count() < fsdp * tp:
            raise TrainError(
                f"mesh fsdp×tp = {fsdp}×{tp} needs {fsdp * tp} devices, JAX sees {jax.device_count()} "
                "(on CPU: XLA_FLAGS=--xla_force_host_platform_device_count=N before starting)"
            )
        self.rows = self.context.metrics_row_builder(devices=fsdp * tp)  # the one builder of metrics rows
        self.settings = ModelSettings.of(r, jax.devices()[0].platform)
        use_compile_cache(self.run_dir / XLA_CACHE)
        if self.context.resume_from:  # --resume restores the latest step: check its bytes first
            verify_saved(step_folders(self.run_dir)[self.context.resume_from], "checkpoint", "resume")
        self.dataset = train_dataset(r, self.step_plan, self.prepared)
        _, schedule = make_optimizer(r.train, self.step_plan.total_steps, lora_rank=r.lora.rank)
        self.learning_rates = schedule_values(schedule, self.step_plan.total_steps)  # the host's: no op on the chip
        self.mesh = make_mesh(fsdp, tp)
        with mesh_context(self.mesh):  # pitfall A: trainer, optimizer state and inputs under the legacy mesh
            self.trainer, self.replicated = self._trainer()
            yield self

    def _trainer(self):
        from flax import nnx

        from crosstune.train.jax.layer_scan import stack_layers
        from crosstune.train.jax.loss import loss_fn, model_inputs
        from crosstune.train.jax.model import (
            build_model,
            optimizer_sharding_mismatches,
            place_state,
            sharding_problems,
            spec_problems,
        )
        from crosstune.train.jax.optimizer import make_optimizer
        from crosstune.train.jax.trainer import CrosstunePeftTrainer, training_config

        r, k, total = self.recipe, self.step_plan.accumulation, self.step_plan.total_steps
        model_dir = model_path(r)  # checked by the session (a hub id: its snapshot)
        model, replicated = build_model(r.model.family, model_dir, self.mesh, **self.settings.kwargs())
        if self.settings.scan_layers:
            stack_layers(model, self.mesh)  # before the trainer: it restores the checkpoint in the stacked layout
        optimizer, _ = make_optimizer(r.train, total, lora_rank=r.lora.rank)
        checkpoints = (self.run_dir / CHECKPOINTS, r.train.checkpoint_every, r.train.keep_last)
        config = training_config(k, total, checkpoints)
        _configure_orbax()
        absl = logging.getLogger("absl")
        level = absl.level
        absl.setLevel(logging.CRITICAL)  # a damaged checkpoint is reported once, below, not as absl ERROR lines too
        try:
            trainer = CrosstunePeftTrainer(model, optimizer, config)  # restores the latest checkpoint, if any
        except Exception as e:
            raise _restore_error(self.run_dir, e) from None
        finally:
            absl.setLevel(level)
        trainer.with_loss_fn(loss_fn).with_gen_model_input_fn(model_inputs)
        trainer.scoped_vmem_kib = r.backend.jax.scoped_vmem_kib
        place_state(trainer.model, self.mesh)
        place_state(trainer.optimizer, self.mesh)
        problems = spec_problems(trainer.model)
        problems += sharding_problems(nnx.state(trainer.model, nnx.LoRAParam), self.mesh)
        problems += sharding_problems(nnx.state(trainer.optimizer, nnx.optimizer.OptState), self.mesh)
        problems += optimizer_sharding_mismatches(trainer.optimizer, trainer.model)
        if problems:
            raise TrainError("invalid shardings:\n  " + "\n  ".join(problems[:10]))
        return trainer, replicated

    def fit(self) -> FitResult:
        """Train from the restored step to the end; metrics, run.json and checkpoints into the run directory."""
        import jax

        from crosstune.train.jax.progress import CompileTimer, SaveTimer, StepRecorder
        from crosstune.train.jax.train_step import TRAIN_STEP_NAME

        r, d, trainer = self.recipe, self.step_plan, self.trainer
        start = trainer.train_steps  # the restored step: the context's resume point (the session checked it)
        writer = MetricsWriter(self.run_dir, resume_from_step=start) if jax.process_index() == 0 else None
        self.counts = {}
        self.logged, self.unpushed = start, None  # the last metrics row written; a checkpoint not yet in the bucket
        bar = ProgressBar("jax", d.total_steps, start, self.progress, status="compiling…")

        def emit(m) -> None:
            if writer is not None:
                writer.write(m)
                self.logged = m.step
                self._push_logged()
            bar.update(m)

        saves = self.saves = SaveTimer(
            trainer.checkpoint_manager, r.train.checkpoint_every, on_saved=self._record_checksums
        )
        with CompileTimer(TRAIN_STEP_NAME) as compile_timer:
            recorder = StepRecorder(
                first_step=start,
                accumulation=d.accumulation,
                excluded=lambda: compile_timer.seconds + saves.seconds,
                make_metrics=self._metrics,
                emit=emit,
            )
            trainer.with_training_hooks(recorder)
            try:
                trainer.train(self.micro_batches(start))
            finally:
                bar.close()
        if recorder.pending:
            raise TrainError(f"steps {recorder.pending} never reported a loss")
        if writer is not None:
            timings = RunTimings(
                compile_time_s=compile_timer.seconds, compile_time_measure="xla", checkpoint_time_s=saves.seconds
            )
            writer.finish(timings, step=start)
        return FitResult(trainer.train_steps, lora=self._final_lora())

    def _final_lora(self) -> LoraWeights:
        """The trained LoRA in the PEFT layout, gathered from the devices of every process (a collective: every
        process calls it; only the lead's copy is written, as <run>/adapter)."""
        import jax
        from flax import nnx
        from jax.experimental import multihost_utils

        from crosstune.train.jax.layer_scan import per_layer

        state = nnx.state(self.trainer.model, nnx.LoRAParam)
        leaves = jax.tree_util.tree_leaves_with_path(state)
        params = {param_name(p): np.asarray(multihost_utils.process_allgather(v, tiled=True)) for p, v in leaves}
        params = per_layer(params)  # a stacked model's layers (backend.jax.scan_layers) as tunix names them
        lora = self.recipe.lora
        return qwix_to_lora(params, self.spec, rank=lora.rank, alpha=float(lora.alpha))

    def _record_checksums(self, step: int) -> None:
        """After Orbax finalised `step` (the save is asynchronous: every process waits, as its next save would),
        process 0 records the step folder's sha256."""
        import jax

        self.trainer.checkpoint_manager._checkpoint_manager.wait_until_finished()
        if jax.process_index() == 0:
            record_checksums(self.run_dir / CHECKPOINTS / str(step))
            self.unpushed = step
            self._push_logged()

    def _push_logged(self) -> None:
        """Push the run directory to its bucket copy once the last checkpoint and its step's metrics row are both
        written (the trainer saves step N before its row is logged: a copy without it would resume with a gap)."""
        bucket, step = self.context.bucket, self.unpushed
        if bucket is not None and step is not None and self.logged >= step:
            t0 = time.perf_counter()
            bucket.push_checkpoint(step)
            self.saves.seconds += time.perf_counter() - t0  # checkpoint time, not the next step's
            self.unpushed = None

    def micro_batches(self, start: int):
        """The trainer's iterator: stand-in batches for the micro-batches already trained, then steps start+1..N as
        global arrays; each step's token counts go into `self.counts` before its first micro-batch is handed out."""
        from crosstune.train.jax.batches import device_batch, optimizer_steps

        k, total = self.step_plan.accumulation, self.step_plan.total_steps
        yield from (_SKIPPED for _ in range(start * k))
        stream = (self.dataset[i] for i in range(start * k, total * k))
        for step, group in enumerate(optimizer_steps(stream, k, global_sum), start=start + 1):
            self.counts[step] = tuple(
                group[0][k] for k in ("step_trained_tokens", "step_tokens", "step_computed_tokens")
            )
            yield from (global_batch(device_batch(m), self.mesh) for m in group)

    def facts(self) -> StackFacts:
        """Where and how this run trains (after setup: the compute dtype and the replicated tensors are known)."""
        import jax

        m = self.recipe.backend.jax.mesh
        return StackFacts(
            platform=jax.devices()[0].platform,
            precision="bf16" if self.settings.compute_dtype == "bfloat16" else "fp32",
            devices=m.fsdp * m.tp,
            processes=jax.process_count(),
            mesh=Mesh(fsdp=m.fsdp, tp=m.tp),
            details={"replicated_tensors": sorted({x.path for x in self.replicated})},
        )

    def _metrics(self, step: int, loss: float, grad_norm: float, step_time_s: float):
        from crosstune.train.jax.progress import peak_memory_gib

        trained, tokens, computed = self.counts.pop(step)
        return self.rows.row(
            step=step,
            loss=loss,
            learning_rate=float(self.learning_rates[step - 1]),  # the optimizer's count is step - 1 when it applies
            grad_norm=grad_norm,
            trained_tokens=trained,
            tokens=tokens,
            computed_tokens=computed,
            step_time_s=step_time_s,
            peak_memory_gib=peak_memory_gib(),
        )


REPLICA_PARALLEL_MIN_BYTES = 4 * MIB


def _configure_orbax() -> None:
    """Orbax saves a replicated array by splitting it across its replicas: one eager slice (and one compilation)
    per shard per save. Worth it for large arrays only; small LoRA leaves are written by one replica (this is
    Orbax's process-wide jax.Array handler)."""
    import jax
    import orbax.checkpoint as ocp
    from absl import logging as absl_logging

    handler = ocp.type_handlers.ArrayHandler(min_slice_bytes_for_replica_parallel=REPLICA_PARALLEL_MIN_BYTES)
    if getattr(sys.unraisablehook, "__name__", "") != "filtered":
        sys.unraisablehook = _drop_closed_loop_noise(sys.unraisablehook)
    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)  # "overriding jax.Array": intended
    try:
        ocp.type_handlers.register_type_handler(jax.Array, handler, override=True)
    finally:
        absl_logging.set_verbosity(verbosity)


def _restore_error(run_dir: Path, error: Exception) -> Exception:
    """A checkpoint Orbax can't read becomes a TrainError naming it and the way out; anything else stays."""
    steps = saved_steps(run_dir)
    if not steps:
        return error
    root = run_dir / CHECKPOINTS
    reason = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
    earlier = f" to resume from step {steps[-2]}" if len(steps) > 1 else ""
    return TrainError(
        f"{root / str(steps[-1])}: the Orbax checkpoint can't be restored ({reason}): it is damaged; "
        f"move that folder aside{earlier}, or train into a new --run-dir"
    )


def _drop_closed_loop_noise(hook):
    """Tensorstore reports reads that finish after Orbax closed its event loop (a failed restore) through
    sys.unraisablehook, dozens of "Event loop is closed" tracebacks: drop those, pass everything else on."""

    def filtered(unraisable) -> None:
        value = unraisable.exc_value
        if not (isinstance(value, RuntimeError) and str(value) == "Event loop is closed"):
            hook(unraisable)

    return filtered


_SKIPPED = {"skipped": True}  # tunix drops the first (restored step × k) items of the iterator unread
