"""Per-step metrics from inside Tunix's PeftTrainer (hooks), compile time kept apart (the bar: train/progress_bar.py).

Timing: the trainer runs with one computation in flight, so when step s+1's first micro-batch starts, step s has
finished; a step's wall time is the distance between those starts (it includes loading the next batch, as torch's
does). Compiling the train step (tracing, lowering, XLA) and checkpoint saves falling inside a step are
subtracted from it; compilation is reported once, as compile_time_s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import jax
from tunix.sft import hooks

from crosstune.run.metrics import StepMetrics, host_peak_rss_bytes
from crosstune.train.jax.optimizer import last_grad_norm
from crosstune.units import bytes_to_gib

COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


class CompileTimer:
    """Seconds JAX spent tracing, lowering and compiling functions whose name contains `name` (a jax.monitoring
    listener). Only the train step's compilation blocks a step for long; small eager ops compiled on the way
    overlap the running step and stay in its time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seconds = 0.0
        self._lock = threading.Lock()

    def _listen(self, event: str, duration_secs: float, **kwargs: object) -> None:
        if event in COMPILE_EVENTS and self.name in str(kwargs.get("fun_name", "")):
            with self._lock:
                self.seconds += duration_secs

    def __enter__(self) -> CompileTimer:
        self._listener = self._listen  # one bound-method object, to unregister the same one
        jax.monitoring.register_event_duration_secs_listener(self._listener)
        return self

    def __exit__(self, *exc: object) -> None:
        from jax._src import monitoring

        if self._listener in monitoring.get_event_duration_listeners():  # tunix's trainer.close() clears them all
            jax.monitoring.unregister_event_duration_listener(self._listener)


class SaveTimer:
    """Seconds spent in a checkpoint manager's `save` (wraps that one instance's method). A save first waits for
    the step that produced the state; that wait is the step's own time, so it is taken before the clock starts."""

    def __init__(self, manager, every: int, on_saved: Callable[[int], None] | None = None) -> None:
        from flax import nnx

        self.seconds = 0.0
        save = manager.save

        def timed(step, model, optimizer=None, *args, **kwargs):
            if step % every == 0 or kwargs.get("force"):
                jax.block_until_ready(nnx.state(model, nnx.LoRAParam))
                if optimizer is not None:
                    jax.block_until_ready(nnx.state(optimizer))
            t0 = time.perf_counter()
            try:
                saved = save(step, model, optimizer, *args, **kwargs)
                if saved and on_saved is not None:
                    on_saved(step)  # e.g. checksums of the finished step (counted as save time)
                return saved
            finally:
                self.seconds += time.perf_counter() - t0

        manager.save = timed


def device_peak_bytes(stats: dict) -> int | None:
    """A device's peak memory from its `memory_stats()`: the live arrays' peak plus, where the allocator reports it
    apart (TPU: `peak_bytes_reserved`), the peak of what compiled programs reserved for their temporaries. On a v5e
    the sum matched XLA's memory_analysis of the step within 0.1 GB; `peak_bytes_in_use` alone left out the step's
    temporaries (4.74 GiB of a 9.83 GB peak). None where the device keeps no statistics (CPU)."""
    if "peak_bytes_in_use" not in stats:
        return None
    return int(stats["peak_bytes_in_use"]) + int(stats.get("peak_bytes_reserved", 0))


def peak_memory_gib() -> float:
    """Peak accelerator memory of the busiest local device (device_peak_bytes); host peak RSS where devices don't
    say (CPU)."""

    peaks = []
    for d in jax.local_devices():
        stats = d.memory_stats() if hasattr(d, "memory_stats") else None
        peak = device_peak_bytes(stats or {})
        if peak is not None:
            peaks.append(peak)
    return bytes_to_gib(max(peaks) if peaks else host_peak_rss_bytes())


class StepRecorder(hooks.TrainingHooks):
    """Collects each optimizer step's loss (Tunix reports it one step late), wall time and grad norm, and hands
    complete steps, in order, to `emit(StepMetrics)`. `excluded()` is the running total of seconds (compilation,
    checkpoint saves) that don't count as step time."""

    def __init__(
        self,
        *,
        first_step: int,
        accumulation: int,
        excluded: Callable[[], float],
        make_metrics: Callable[..., StepMetrics],
        emit: Callable[[StepMetrics], None],
    ):
        self.k = accumulation
        self.next_step = first_step + 1
        self.excluded = excluded
        self.make_metrics = make_metrics
        self.emit = emit
        self._start: dict[int, tuple[float, float]] = {}  # step -> (wall, excluded seconds) at its start
        self._done: dict[int, dict] = {}  # step -> {"time", "grad_norm", "loss"}

    def _mark(self, trainer) -> None:
        now, excluded = time.perf_counter(), self.excluded()
        finished = trainer.train_steps
        if finished in self._start:  # the step that just ended
            wall0, excluded0 = self._start.pop(finished)
            entry = self._done.setdefault(finished, {})
            entry["time"] = max((now - wall0) - (excluded - excluded0), 0.0)
            entry["grad_norm"] = last_grad_norm(trainer.optimizer.opt_state)
        self._start[finished + 1] = (now, excluded)
        self._flush()

    def on_train_start(self, train_ctx) -> None:
        pass

    def on_train_step_start(self, train_ctx) -> None:
        if train_ctx.iter_steps % self.k == 0:  # first micro-batch of the next optimizer step
            self._mark(train_ctx)

    def on_train_step_end(self, train_ctx, train_step: int, train_loss: float) -> None:
        self._done.setdefault(int(train_step), {})["loss"] = float(train_loss)
        self._flush()

    def on_train_end(self, train_ctx) -> None:
        self._mark(train_ctx)
        self._start.clear()

    def on_eval_step_start(self, train_ctx) -> None:
        pass

    def on_eval_step_end(self, train_ctx, eval_loss: float) -> None:
        pass

    def _flush(self) -> None:
        while {"loss", "time"} <= set(self._done.get(self.next_step, {})):
            d = self._done.pop(self.next_step)
            self.emit(
                self.make_metrics(step=self.next_step, loss=d["loss"], grad_norm=d["grad_norm"], step_time_s=d["time"])
            )
            self.next_step += 1

    @property
    def pending(self) -> list[int]:
        return sorted(self._done)
