"""Training metrics with ONE set of names and definitions for both backends (JSONL + TensorBoard).

Loss convention (both backends): mean next-token cross-entropy over the trained (assistant) tokens of the
whole optimizer step. With gradient accumulation the per-token losses of all micro-batches are summed and
divided by the step's total trained-token count (token-weighted), not averaged per micro-batch.
"""

from __future__ import annotations

import json
import math
import resource
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from crosstune.errors import CrosstuneError
from crosstune.families.spec import ModelSpec
from crosstune.fsutil import say
from crosstune.hardware import HardwareTarget
from crosstune.run.layout import METRICS_JSONL, TENSORBOARD

# name -> definition; the run directory's metrics.jsonl carries exactly these keys.
METRIC_DEFINITIONS: dict[str, str] = {
    "step": "optimizer step, 1-based",
    "epoch": "fractional epoch at the end of the step",
    "loss": "mean next-token cross-entropy over the step's trained (assistant) tokens, token-weighted "
    "across gradient-accumulation micro-batches",
    "learning_rate": "learning rate applied at this step",
    "grad_norm": "global L2 norm of the LoRA gradients before clipping",
    "trained_tokens": "tokens with loss_mask = 1 in the step",
    "tokens": "non-padding tokens in the step (prompt + answer)",
    "computed_tokens": "token positions the model computed in the step, padding included (jax: every position of "
    "every [batch, seq_len] row; torch: the padding-free rows' tokens). Equal to `tokens` when nothing is padded; "
    "unpacked rows make the jax backend compute far more than it trains (see `crosstune recipe check`)",
    "step_time_s": "wall time of the step, excluding compilation (reported once as compile_time_s)",
    "trained_tokens_per_s": "trained_tokens / step_time_s, summed over all devices",
    "tokens_per_s": "tokens / step_time_s, summed over all devices",
    "peak_memory_gb": "peak accelerator memory per device (GB); host peak RSS on CPU",
    "mfu": "model FLOPs utilisation on real tokens: `tokens` × model FLOPs per token / (step_time_s × peak bf16 "
    "FLOP/s of all devices). Model FLOPs follow the LoRA convention: forward + backward to activations (2× forward, "
    "'4N'), NOT counting activation recompute (until issue 16 `mfu` counted it); null on CPU",
    "mfu_computed": "as `mfu`, on `computed_tokens` (padding included): the work the chips were given, useful or not",
    "hfu": "hardware FLOPs utilisation: `computed_tokens` × (forward + backward to activations + the recomputed "
    "forward when activations are recomputed, i.e. 3× forward; with torch's selective recompute the recomputed "
    "forward leaves out the attention, whose outputs are kept) / (step_time_s × peak); null on CPU",
}


@dataclass
class StepMetrics:
    step: int
    epoch: float
    loss: float
    learning_rate: float
    grad_norm: float
    trained_tokens: int
    tokens: int
    computed_tokens: int
    step_time_s: float
    trained_tokens_per_s: float
    tokens_per_s: float
    peak_memory_gb: float | None
    mfu: float | None
    mfu_computed: float | None
    hfu: float | None


def host_peak_rss_gb() -> float:
    """Peak resident memory of this process (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def flops_utilisation(
    spec: ModelSpec,
    tokens: int,
    context: int,
    step_time_s: float,
    hardware: HardwareTarget,
    devices: int,
    recompute_activations: bool,
    recompute_attention: bool = True,
) -> float | None:
    """LoRA-convention FLOPs of `tokens` / (step time × peak of all devices); None where the chip has no
    meaningful peak (CPU). `recompute_activations` adds the recomputed forward (hardware FLOPs, not model FLOPs),
    without its attention when `recompute_attention` is false (selective recompute keeps the attention outputs)."""
    peak = hardware.chip.peak_bf16_tflops
    if peak is None or step_time_s <= 0:
        return None
    per_token = spec.lora_train_flops_per_token(context, recompute_activations, recompute_attention=recompute_attention)
    flops = tokens * per_token
    return flops / (step_time_s * peak * 1e12 * devices)


def make_step_metrics(
    *,
    step: int,
    epoch: float,
    loss: float,
    learning_rate: float,
    grad_norm: float,
    trained_tokens: int,
    tokens: int,
    computed_tokens: int,
    step_time_s: float,
    peak_memory_gb: float | None,
    spec: ModelSpec,
    context: int,
    hardware: HardwareTarget,
    devices: int,
    recompute_activations: bool,
    recompute_attention: bool = True,
) -> StepMetrics:
    """Derive rates, MFU and HFU the same way for both backends (`recompute_attention`: see flops_utilisation)."""
    util = lambda n, remat: flops_utilisation(  # noqa: E731
        spec, n, context, step_time_s, hardware, devices, remat, recompute_attention
    )
    rate = (lambda n: n / step_time_s) if step_time_s > 0 else (lambda n: math.nan)
    return StepMetrics(
        step=step,
        epoch=epoch,
        loss=float(loss),
        learning_rate=float(learning_rate),
        grad_norm=float(grad_norm),
        trained_tokens=int(trained_tokens),
        tokens=int(tokens),
        computed_tokens=int(computed_tokens),
        step_time_s=step_time_s,
        trained_tokens_per_s=rate(trained_tokens),
        tokens_per_s=rate(tokens),
        peak_memory_gb=peak_memory_gb,
        mfu=util(tokens, False),
        mfu_computed=util(computed_tokens, False),
        hfu=util(computed_tokens, recompute_activations),
    )


class MetricsWriter:
    """Appends StepMetrics to <run>/metrics.jsonl and TensorBoard events under <run>/tensorboard."""

    def __init__(self, run_dir: Path, resume_from_step: int = 0):
        self.path = Path(run_dir) / METRICS_JSONL
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_from_step and self.path.exists():
            self._truncate_after(resume_from_step)  # a resumed run rewrites the steps after its checkpoint
        from tensorboard.summary import Writer

        self._tb = Writer(str(Path(run_dir) / TENSORBOARD))
        self._file = self.path.open("a", encoding="utf-8")

    def _truncate_after(self, step: int) -> None:
        kept = [json.dumps(row) for row in read_metrics_file(self.path) if row.get("step", 0) <= step]
        self.path.write_text("".join(line + "\n" for line in kept))

    def write(self, m: StepMetrics) -> None:
        row = asdict(m)
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and value is not None and math.isfinite(value):
                self._tb.add_scalar(f"train/{key}", value, m.step)
        self._tb.flush()

    def write_event(self, name: str, value: float, step: int = 0) -> None:
        """One-off figures such as compile_time_s, in TensorBoard only (metrics.jsonl stays per-step)."""
        self._tb.add_scalar(f"run/{name}", value, step)
        self._tb.flush()

    def close(self) -> None:
        self._file.close()
        self._tb.close()


def read_metrics(run_dir: Path) -> list[dict]:
    """The run's metrics rows ([] when it has none yet), by read_metrics_file's rule."""
    path = Path(run_dir) / METRICS_JSONL
    return read_metrics_file(path) if path.exists() else []


def read_metrics_file(path: Path) -> list[dict]:
    """The rows of a metrics.jsonl — the one rule every reader (resume, export, cost, report) follows: a torn last
    line (the process died mid-write) is dropped, saying so; a bad line elsewhere, or a line that is not a JSON
    object, is an error naming file:line."""

    lines = Path(path).read_text(encoding="utf-8", errors="replace").split("\n")
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if all(not rest.strip() for rest in lines[i + 1 :]):
                say(f"[metrics] {path}:{i + 1}: dropped a torn last line (the run stopped mid-write): {line[:60]!r}")
                break
            raise CrosstuneError(
                f"{path}:{i + 1}: not a JSON metrics row ({line[:60]!r}); restore the file or remove that line"
            ) from None
        if not isinstance(row, dict):
            raise CrosstuneError(f"{path}:{i + 1}: a metrics row is a JSON object, not {line[:60]!r}")
        for key, value in row.items():
            why = _bad_value(key, value)
            if why:
                raise CrosstuneError(
                    f"{path}:{i + 1}: {key} is {value!r}, not {why}; restore the file or remove that line"
                )
        rows.append(row)
    return rows


_COUNTS = ("step", "trained_tokens", "tokens", "computed_tokens")


def _bad_value(key: str, value: object) -> str | None:
    """What a metric must be, when `value` isn't that (None: fine). The writer's own output always passes: counts are
    whole numbers, step_time_s a measured duration; a rate, loss or utilisation may be NaN (a diverged or 0 s step)."""
    if key not in METRIC_DEFINITIONS:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if key in _COUNTS:
        low = 1 if key == "step" else 0
        ok = number and isinstance(value, int) and value >= low
        return None if ok else f"a whole number >= {low}"
    if key == "step_time_s":
        return None if number and math.isfinite(value) and value >= 0 else "a finite number of seconds >= 0"
    return None if value is None or number else "a number (or null)"


class StepTimer:
    """Wall time of one step (`with StepTimer() as t: ...; t.seconds`)."""

    def __init__(self) -> None:
        self._t0 = 0.0

    def __enter__(self) -> StepTimer:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
