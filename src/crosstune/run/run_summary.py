"""What cost and report need from a run directory (through crosstune.run's typed readers — never backend internals).

Timing as both backends record it (crosstune.run.records.RunTimings): `step_time_s` per metrics row excludes
compilation and checkpoint saves, which run.json records once (`compile_time_s`, `checkpoint_time_s`; how the
compile time was measured: `compile_time_measure`). The torch backend logs a row every `train.log_every` steps whose
step_time_s is the mean over the steps since the previous row. A figure a run did not record (a one-step torch run's
warm-up) stays None and is named.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from crosstune.errors import InputError
from crosstune.recipe.schema import Recipe
from crosstune.run.layout import METRICS_JSONL, read_run_recipe
from crosstune.run.metrics import StepMetrics, read_metrics
from crosstune.run.records import RunRecord, read_run_record


@dataclass
class RunSummary:
    path: Path
    record: RunRecord
    recipe: Recipe | None  # the run's recipe.yaml (None: the run has none)
    rows: list[StepMetrics]
    steps: int
    step_time_s: float  # Σ over optimizer steps, compile and checkpoint saves excluded where the backend says so
    compile_time_s: float | None
    checkpoint_time_s: float | None
    trained_tokens: int
    tokens: int
    extrapolated: bool  # rows logged every k > 1 steps: totals scale each row by the steps it stands for
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.backend} · {self.hardware} · {self.path.name}"

    @property
    def backend(self) -> str:
        return self.record.backend

    @property
    def hardware(self) -> str:
        return self.record.hardware

    @property
    def loss_convention(self) -> str:
        return self.record.loss_convention

    @property
    def wall_time_s(self) -> float | None:
        """Steps + compilation + checkpoint saves; None when the run didn't record the latter two."""
        if self.compile_time_s is None or self.checkpoint_time_s is None:
            return None
        return self.step_time_s + self.compile_time_s + self.checkpoint_time_s

    @property
    def trained_tokens_per_s(self) -> float | None:
        return self.trained_tokens / self.step_time_s if self.step_time_s > 0 else None

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.step_time_s if self.step_time_s > 0 else None

    @property
    def mean_mfu(self) -> float | None:
        values = [r.mfu for r in self.rows if r.mfu is not None]
        return statistics.fmean(values) if values else None

    @property
    def final_loss(self) -> float | None:
        return self.rows[-1].loss if self.rows else None

    def missing_timing(self) -> list[str]:
        return [name for name in ("compile_time_s", "checkpoint_time_s") if getattr(self, name) is None]


def read_run(path: Path) -> RunSummary:
    """Summarize a run directory; a directory without run.json or metrics gets an error saying what is missing, and a
    figure that would make a cost or a chart lie (a non-finite loss, a step of 0 s, more trained tokens than tokens,
    an MFU outside [0, 1], steps out of order) an error naming file:line and the field."""
    path = Path(path)
    record, recipe, rows = read_run_record(path), read_run_recipe(path), read_metrics(path)
    metrics_file = path / METRICS_JSONL
    if not rows:
        raise InputError(f"{metrics_file}: no metrics rows — the run has no timing or token data to cost")
    previous = 0  # a resumed run keeps its rows up to the checkpoint: the steps rise from the first row on
    for n, row in enumerate(rows, 1):
        why = _implausible(row, previous)
        if why:
            raise InputError(f"{metrics_file}:{n}: {why}")
        previous = row.step
    previous, time_s, trained, tokens, extrapolated = record.resumed_from_step, 0.0, 0, 0, False
    for row in rows:
        gap = max(1, row.step - previous)  # the steps this row stands for
        extrapolated |= gap > 1
        time_s += row.step_time_s * gap
        trained += row.trained_tokens * gap
        tokens += row.tokens * gap
        previous = row.step
    summary = RunSummary(
        path=path,
        record=record,
        recipe=recipe,
        rows=rows,
        steps=rows[-1].step,
        step_time_s=time_s,
        compile_time_s=record.compile_time_s,
        checkpoint_time_s=record.checkpoint_time_s,
        trained_tokens=trained,
        tokens=tokens,
        extrapolated=extrapolated,
    )
    if extrapolated:
        summary.notes.append("metrics logged every k > 1 steps: step time and token totals scale each row by k")
    if record.resumed_from_step:
        summary.notes.append(f"resumed from step {record.resumed_from_step}: the earlier steps are not counted")
    missing = summary.missing_timing()
    if missing:
        summary.notes.append(
            f"run.json records no {' / '.join(missing)} ({summary.backend} backend): "
            "the cost with them included is unknown"
        )
    return summary


def _implausible(row: StepMetrics, previous_step: int) -> str | None:
    """Why a metrics row (types already checked by crosstune.run.metrics) can't be costed or plotted; None if it can."""
    loss, mfu = row.loss, row.mfu
    if row.step <= previous_step:
        return f"step {row.step} does not follow step {previous_step}: rows out of order or repeated"
    if not math.isfinite(loss) or loss < 0:
        return f"loss is {loss!r}: a cross-entropy is a finite number >= 0 (a run that diverged has no final loss)"
    if row.step_time_s <= 0:
        return "step_time_s is 0: no optimizer step takes no time, so no rate or cost follows from it"
    if row.trained_tokens > row.tokens:
        return f"trained_tokens {row.trained_tokens} > tokens {row.tokens}: trained tokens are among the tokens"
    if mfu is not None and not 0 <= mfu <= 1:
        return f"mfu is {mfu!r}: a utilisation is a fraction in [0, 1]"
    return None
