"""Per-step timing and memory for the torch backend's metrics (the jax backend's progress.py has the same role).

Timing, as the jax backend keeps it (crosstune.run.records.RunTimings): checkpoint saves and torch.compile's
compilation are kept out of the step times and recorded once in run.json; without compiled layers the first step's
warm-up (its wall time over the next measured steps' mean: CUDA/cuBLAS set-up, allocator growth) is kept out the
same way, as compile_time_s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from crosstune.run.metrics import host_peak_rss_bytes
from crosstune.units import bytes_to_gib


def sync_device() -> None:
    """Wait for the GPU's queued work (CPU ops are synchronous)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def peak_memory_gib() -> float:
    """Peak GPU memory torch allocated in this process; host peak RSS on CPU (as the jax backend measures)."""
    import torch

    return bytes_to_gib(torch.cuda.max_memory_allocated() if torch.cuda.is_available() else host_peak_rss_bytes())


def torch_compile_seconds() -> float:
    """Seconds torch.compile has spent compiling in this process so far: dynamo + inductor, forward frames and
    backward graphs (torch's own total, `total_wall_time` of torch._dynamo.utils.calculate_time_spent)."""
    from torch._dynamo.utils import calculate_time_spent

    return calculate_time_spent().get("total_wall_time", 0.0)


class StepClock:
    """Mean wall time per optimizer step between device syncs, less the seconds `excluded()` counts (checkpoint
    saves, compilation). With `warm_up`, the first step is timed alone; once the next sync says what a step takes,
    its extra is its warm-up (`warmup_s`), kept out of its row. A first step logged alone is held until then."""

    def __init__(self, excluded: Callable[[], float], warm_up: bool, now: Callable[[], float] = time.perf_counter):
        self.excluded, self.warm_up, self.now = excluded, warm_up, now
        self.warmup_s: float | None = None
        self._first_s: float | None = None
        self._held: Any = None
        self._t0, self._excluded0, self._steps = now(), excluded(), 0

    def tick(self) -> None:
        """An optimizer step ended."""
        self._steps += 1

    @property
    def times_first_step(self) -> bool:
        """The step that just ended is the first, to be timed alone (sync the device, then `measure(None)`)."""
        return self.warm_up and self._first_s is None

    def measure(self, row: Any) -> list[tuple[Any, float]]:
        """At a device sync: `row` (None: the first step, not logged) ends here; the rows now ready to write, each
        with its step time."""
        now, excluded = self.now(), self.excluded()
        per_step = max(((now - self._t0) - (excluded - self._excluded0)) / self._steps, 0.0)
        steps, self._t0, self._excluded0, self._steps = self._steps, now, excluded, 0
        if self.times_first_step:
            self._first_s = per_step
            self._held = row
            return []
        ready = []
        if self._first_s is not None and self.warmup_s is None:
            self.warmup_s = max(self._first_s - per_step, 0.0)
            if self._held is not None:
                ready.append((self._held, self._first_s - self.warmup_s))
                self._held = None
            else:  # this row covers the first step too
                per_step = (self._first_s - self.warmup_s + steps * per_step) / (steps + 1)
        return [*ready, (row, per_step)]

    def finish(self) -> list[tuple[Any, float]]:
        """A first step logged alone that no later step followed (a one-step run): its row, its whole time."""
        held, self._held = self._held, None
        return [] if held is None else [(held, self._first_s)]
