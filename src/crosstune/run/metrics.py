"""Training metrics with ONE set of names and definitions for both backends (JSONL + TensorBoard).

Loss convention (both backends): mean next-token cross-entropy over the trained (assistant) tokens of the
whole optimizer step. With gradient accumulation the per-token losses of all micro-batches are summed and
divided by the step's total trained-token count (token-weighted), not averaged per micro-batch.
"""

from __future__ import annotations

import json
import math
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crosstune.errors import CrosstuneError, before_epoch
from crosstune.families.spec import ModelSpec
from crosstune.fsutil import say
from crosstune.hardware import HardwareTarget, get_hardware
from crosstune.recipe import Recipe
from crosstune.run.layout import METRICS_JSONL, TENSORBOARD, run_file
from crosstune.run.records import RunTimings, record_timings
from crosstune.untrusted_files import UnreadableFile, parse_json

Tokens = Annotated[int, Field(ge=0)]


def host_peak_rss_bytes() -> int:
    """Peak resident memory of this process (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class StepMetrics(BaseModel):
    """One metrics.jsonl row; the field descriptions are the definitions (METRIC_DEFINITIONS)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    step: Annotated[int, Field(ge=1)] = Field(description="optimizer step, 1-based")
    epoch: float = Field(description="fractional epoch at the end of the step")
    loss: float = Field(
        description="mean next-token cross-entropy over the step's trained (assistant) tokens, token-weighted "
        "across gradient-accumulation micro-batches"
    )
    learning_rate: float = Field(description="learning rate applied at this step")
    grad_norm: float = Field(description="global L2 norm of the LoRA gradients before clipping")
    trained_tokens: Tokens = Field(description="tokens with loss_mask = 1 in the step")
    tokens: Tokens = Field(description="non-padding tokens in the step (prompt + answer)")
    computed_tokens: Tokens = Field(
        description="token positions the model computed in the step, padding included (jax: every position of "
        "every [batch, seq_len] row; torch: the padding-free rows' tokens). Equal to `tokens` when nothing is "
        "padded; unpacked rows make the jax backend compute far more than it trains (see `crosstune recipe check`)"
    )
    step_time_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        description="wall time of the step, compilation and checkpoint saves excluded (run.json records them once: "
        "compile_time_s, checkpoint_time_s). torch logs a row every train.log_every steps with the mean over the "
        "steps since the previous row"
    )
    trained_tokens_per_s: float = Field(description="trained_tokens / step_time_s, summed over all devices")
    tokens_per_s: float = Field(description="tokens / step_time_s, summed over all devices")
    peak_memory_gib: Annotated[float, Field(ge=0)] | None = Field(
        description="peak accelerator memory of the busiest local device, in GiB (2^30 bytes; torch: "
        "max_memory_allocated, jax: peak_bytes_in_use + peak_bytes_reserved, the step's temporaries included); the "
        "process's peak RSS on CPU"
    )
    mfu: float | None = Field(
        description="model FLOPs utilisation on real tokens: `tokens` × model FLOPs per token / (step_time_s × peak "
        "bf16 FLOP/s of all devices). Model FLOPs follow the LoRA convention: forward + backward to activations (2× "
        "forward, '4N'), NOT counting activation recompute (hfu counts it); null on CPU"
    )
    mfu_computed: float | None = Field(
        description="as `mfu`, on `computed_tokens` (padding included): the work the chips were given, useful or not"
    )
    hfu: float | None = Field(
        description="hardware FLOPs utilisation: `computed_tokens` × (forward + backward to activations + the "
        "recomputed forward when activations are recomputed, i.e. 3× forward; with torch's selective recompute the "
        "recomputed forward leaves out the attention, whose outputs are kept; with jax's dots recompute it is the "
        "attention alone, the weight matmuls' outputs being kept; with dots_and_attention nothing of the matmuls' "
        "or the attention's) / (step_time_s × peak); null on CPU"
    )


# name -> definition; the run directory's metrics.jsonl carries exactly these keys.
METRIC_DEFINITIONS: dict[str, str] = {name: f.description or "" for name, f in StepMetrics.model_fields.items()}


def flops_utilisation(
    spec: ModelSpec,
    tokens: int,
    context: int,
    step_time_s: float,
    hardware: HardwareTarget,
    devices: int,
    recompute_activations: bool,
    recompute_attention: bool = True,
    recompute_matmuls: bool = True,
) -> float | None:
    """LoRA-convention FLOPs of `tokens` / (step time × peak of all devices); None where the chip has no
    meaningful peak (CPU). `recompute_activations` adds the recomputed forward (hardware FLOPs, not model FLOPs):
    its attention unless `recompute_attention` is false (torch's selective recompute keeps the attention outputs),
    its weight matmuls unless `recompute_matmuls` is false (jax's `dots` keeps their outputs: the recomputed
    forward is the attention alone; elementwise ops are not in the FLOP count)."""
    peak = hardware.chip.peak_bf16_tflops
    if peak is None or step_time_s <= 0:
        return None
    per_token = spec.lora_train_flops_per_token(
        context, recompute_activations, recompute_attention=recompute_attention, recompute_matmuls=recompute_matmuls
    )
    flops = tokens * per_token
    return flops / (step_time_s * peak * 1e12 * devices)


@dataclass(frozen=True)
class MetricsRowBuilder:
    """The one builder of metrics rows, for both backends: what a row derives from the run rather than the step is
    settled here once (the model's FLOPs at `context`, the chips and how many, what the recipe recomputes, the
    micro-batches per step and per epoch), so no backend can leave a key to a default; `row` takes what the backend
    measured in one step and derives rates, epoch, MFU and HFU the same way for both (flops_utilisation)."""

    spec: ModelSpec
    context: int  # tokens per row (data.max_seq_len): attention FLOPs depend on it
    hardware: HardwareTarget
    devices: int  # the backend's devices over all processes
    recompute_activations: bool
    recompute_attention: bool
    recompute_matmuls: bool
    accumulation: int  # micro-batches per optimizer step
    micro_batches_per_epoch: int

    @classmethod
    def for_recipe(
        cls, recipe: Recipe, spec: ModelSpec, *, devices: int, accumulation: int, micro_batches_per_epoch: int
    ) -> MetricsRowBuilder:
        """A run's builder: everything but the device count and the step plan comes from the recipe."""
        t = recipe.train
        return cls(
            spec=spec,
            context=recipe.data.max_seq_len,
            hardware=get_hardware(recipe.hardware),
            devices=devices,
            recompute_activations=t.gradient_checkpointing,
            recompute_attention=t.kernels.recomputes_attention,
            recompute_matmuls=t.kernels.recomputes_matmuls,
            accumulation=accumulation,
            micro_batches_per_epoch=micro_batches_per_epoch,
        )

    def row(
        self,
        *,
        step: int,
        loss: float,
        learning_rate: float,
        grad_norm: float,
        trained_tokens: int,
        tokens: int,
        computed_tokens: int,
        step_time_s: float,
        peak_memory_gib: float | None,
    ) -> StepMetrics:
        """One step's row from what the backend measured in it."""
        util = lambda n, remat: flops_utilisation(  # noqa: E731
            self.spec,
            n,
            self.context,
            step_time_s,
            self.hardware,
            self.devices,
            remat,
            self.recompute_attention,
            self.recompute_matmuls,
        )
        rate = (lambda n: n / step_time_s) if step_time_s > 0 else (lambda n: math.nan)
        return StepMetrics(
            step=step,
            epoch=step * self.accumulation / self.micro_batches_per_epoch,
            loss=float(loss),
            learning_rate=float(learning_rate),
            grad_norm=float(grad_norm),
            trained_tokens=int(trained_tokens),
            tokens=int(tokens),
            computed_tokens=int(computed_tokens),
            step_time_s=step_time_s,
            trained_tokens_per_s=rate(trained_tokens),
            tokens_per_s=rate(tokens),
            peak_memory_gib=peak_memory_gib,
            mfu=util(tokens, False),
            mfu_computed=util(computed_tokens, False),
            hfu=util(computed_tokens, self.recompute_activations),
        )


class MetricsWriter:
    """Appends StepMetrics to <run>/metrics.jsonl and TensorBoard events under <run>/tensorboard; `finish` records
    the run's timings in run.json too (both backends' lead process)."""

    def __init__(self, run_dir: Path, resume_from_step: int = 0):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_JSONL
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_from_step and self.path.exists():
            self._truncate_after(resume_from_step)  # a resumed run rewrites the steps after its checkpoint
        from tensorboard.summary import Writer

        self._tb = Writer(str(self.run_dir / TENSORBOARD))
        self._file = self.path.open("a", encoding="utf-8")

    def _truncate_after(self, step: int) -> None:
        kept = [_row_line(m) for m in read_metrics(self.run_dir) if m.step <= step]
        self.path.write_text("".join(kept))

    def write(self, m: StepMetrics) -> None:
        self._file.write(_row_line(m))
        self._file.flush()
        for key, value in m.model_dump().items():
            if key != "step" and isinstance(value, int | float) and math.isfinite(value):
                self._tb.add_scalar(f"train/{key}", value, m.step)
        self._tb.flush()

    def finish(self, timings: RunTimings, step: int = 0) -> None:
        """The run's compile and checkpoint seconds into run.json (and TensorBoard), then close."""
        for name, value in timings.model_dump().items():
            if isinstance(value, float):
                self._tb.add_scalar(f"run/{name}", value, step)
        record_timings(self.run_dir, timings)
        self.close()

    def close(self) -> None:
        self._file.close()
        self._tb.close()


def _row_line(m: StepMetrics) -> str:
    return json.dumps(m.model_dump()) + "\n"  # python mode: a NaN loss stays NaN (JSON mode would write null)


LEGACY_MEMORY = "peak_memory_gb"  # before the format epoch: torch wrote GiB under this name, jax 10^9-byte GB off CPU


def read_metrics(run_dir: Path) -> list[StepMetrics]:
    """The run's metrics rows ([] when it has none yet) — the one rule every reader (resume, export, cost, report)
    follows: each row checked against StepMetrics (an error naming file:line and the key); a torn last line (the
    process died mid-write) dropped, saying so; a row of a run before the format epoch refused (crosstune.errors.
    before_epoch)."""
    path = run_file(run_dir, METRICS_JSONL)
    rows: list[StepMetrics] = []
    if not path.exists():
        return rows
    if not path.is_file():  # a FIFO would block the read below forever
        raise CrosstuneError(f"{path}: not a regular file; the run's metrics are a file `crosstune train` writes")
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        where = f"{path}:{i + 1}"
        try:
            row = parse_json(line, path, first_line=i + 1)
        except UnreadableFile as e:
            if all(not rest.strip() for rest in lines[i + 1 :]):
                say(f"[metrics] {where}: dropped a torn last line (the run stopped mid-write): {line[:60]!r}")
                break
            raise CrosstuneError(f"{e} ({line[:60]!r}); restore the file or remove that line") from None
        if not isinstance(row, dict):
            raise CrosstuneError(f"{where}: a metrics row is a JSON object, not {line[:60]!r}")
        if LEGACY_MEMORY in row and "peak_memory_gib" not in row:
            raise CrosstuneError(before_epoch(where, f"a row with {LEGACY_MEMORY} (no unit)", "train the run again"))
        rows.append(_checked_row(row, where))
    return rows


def _checked_row(row: dict, where: str) -> StepMetrics:
    try:
        return StepMetrics.model_validate(row)
    except ValidationError as e:
        errors = e.errors()
        missing = [str(x["loc"][0]) for x in errors if x["type"] == "missing"]
        if len(missing) == len(errors):
            lacks = ", ".join(missing)
            raise CrosstuneError(f"{where}: row lacks {lacks}; restore the file or remove that line") from None
        first = next(x for x in errors if x["type"] != "missing")
        key = ".".join(str(part) for part in first["loc"])
        raise CrosstuneError(
            f"{where}: {key} is {first['input']!r}: {first['msg'].lower()}; restore the file or remove that line"
        ) from None
