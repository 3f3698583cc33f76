"""The training progress bar both backends show (rich): step M/N, elapsed, ETA and the latest metrics row."""

from __future__ import annotations

from crosstune.run.metrics import StepMetrics


class ProgressBar:
    """`update(row)` after each metrics row; `close()` at the end. Disabled (`enabled` false: another process leads,
    or the caller asked for quiet), it does nothing."""

    def __init__(self, backend: str, total: int, done: int, enabled: bool, status: str = ""):
        self.enabled = enabled
        if not enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._p = Progress(
            TextColumn(f"[bold]train ({backend})"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[status]}"),
        )
        self._task = self._p.add_task("train", total=total, completed=done, status=status)
        self._p.start()

    @staticmethod
    def status(m: StepMetrics) -> str:
        mfu = f"  mfu {m.mfu:.1%}" if m.mfu is not None else ""
        return f"loss {m.loss:.4f}  lr {m.learning_rate:.2e}  {m.trained_tokens_per_s:,.0f} trained tok/s{mfu}"

    def update(self, m: StepMetrics) -> None:
        if self.enabled:
            self._p.update(self._task, completed=m.step, status=self.status(m))

    def close(self) -> None:
        if self.enabled:
            self._p.stop()
