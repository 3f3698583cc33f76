"""What `crosstune plan --run` measured on an attached chip (crosstune.train.jax.measure), next to what the planner
predicts for the same shape: step time, tokens/s and MFU (crosstune.run.metrics' one convention), the devices' real
peak memory beside XLA's memory_analysis and the planner's estimate, and compile time."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from crosstune.planner.aot_report import held
from crosstune.planner.estimate import Plan
from crosstune.planner.timing import predict_step
from crosstune.recipe import Recipe
from crosstune.run.metrics import flops_utilisation
from crosstune.units import GB


@dataclass(frozen=True)
class MeasuredStep:
    """One recipe step timed on the chip (per device where a byte count; times per micro-step)."""

    recipe: str
    hardware: str
    device_kind: str
    devices: int
    layers: int
    model_layers: int
    micro_batch_tokens: int  # tokens per micro-step over all devices (every position of every row is computed)
    accumulation: int
    build_s: float
    fill_s: float
    lower_s: float
    compile_s: float
    step_times_s: list
    median_s: float
    losses: list
    peak_bytes: int | None  # the busiest device's peak: live arrays + programs' reserved temporaries
    peak_in_use_bytes: int | None
    bytes_limit: int | None  # what XLA lets a program hold on the device
    xla_argument_bytes: int
    xla_output_bytes: int
    xla_alias_bytes: int
    xla_temp_bytes: int
    xla_code_bytes: int
    flops: float
    bytes_accessed: float
    xla_peak_bytes: int = 0  # XLA's peak_memory_in_bytes (crosstune.planner.aot_report.held); 0: none reported

    @property
    def xla_bytes(self) -> int:
        """XLA's memory_analysis total: arguments + outputs not reusing an argument + temporaries + code."""
        return (
            self.xla_argument_bytes
            + self.xla_output_bytes
            - self.xla_alias_bytes
            + self.xla_temp_bytes
            + self.xla_code_bytes
        )

    @property
    def xla_held(self) -> tuple[int, str]:
        """What XLA says the step holds on a device, and which of its figures that is (aot_report.held)."""
        return held(self.xla_bytes, self.xla_peak_bytes)

    @property
    def tokens_per_s(self) -> float:
        return self.micro_batch_tokens / self.median_s

    @classmethod
    def from_dict(cls, d: dict) -> MeasuredStep:
        fields = dataclasses.fields(cls)
        return cls(**{f.name: d[f.name] for f in fields if f.name in d or f.default is dataclasses.MISSING})


def measured_report(plan: Plan, recipe: Recipe, step: MeasuredStep) -> dict:
    """The object `crosstune plan --run --json` prints. `plan` is the planner's for `recipe` at the measured layers."""
    hw, spec = plan.hardware, plan.spec
    context = recipe.data.max_seq_len
    mfu = flops_utilisation(spec, step.micro_batch_tokens, context, step.median_s, hw, step.devices, False)
    predicted = predict_step(plan, recipe) if hw.chip.peak_bf16_tflops is not None else None
    planner_gb = plan.jax_memory.total
    peak_gb = None if step.peak_bytes is None else step.peak_bytes / GB
    usable = hw.chip.usable_gb
    xla_held, xla_held_by = step.xla_held
    return {
        "recipe": step.recipe,
        "hardware": hw.name,
        "device_kind": step.device_kind,
        "devices": step.devices,
        "layers": {"measured": step.layers, "model": step.model_layers, "full_depth": step.layers == step.model_layers},
        "micro_batch_tokens": step.micro_batch_tokens,
        "accumulation": step.accumulation,
        "measured": {
            "micro_step_s": step.median_s,
            "step_times_s": step.step_times_s,
            "tokens_per_s": step.tokens_per_s,
            "mfu": mfu,
            "peak_gb": peak_gb,
            "compile_s": step.lower_s + step.compile_s,
            "first_loss": step.losses[0] if step.losses else None,
        },
        "predicted": {
            "micro_step_s": None if predicted is None else predicted.micro_step_s,
            "tokens_per_s": None if predicted is None else step.micro_batch_tokens / predicted.micro_step_s,
            "by_kind_s": None if predicted is None else predicted.by_kind(),
            "calibration": None if predicted is None else predicted.calibration,
            "planner_gb": planner_gb,
            "fits": plan.jax_memory.fits,
        },
        "xla_gb": step.xla_bytes / GB,
        "xla_peak_gb": step.xla_peak_bytes / GB if step.xla_peak_bytes else None,
        "usable_gb": usable,
        "ran_within_limit": step.bytes_limit is None or xla_held <= step.bytes_limit,
        "within_limit_by": xla_held_by,  # XLA's "peak" or "total": what ran_within_limit read
        "time_predicted_over_measured": None if predicted is None else predicted.micro_step_s / step.median_s,
        "memory_predicted_over_measured": None if peak_gb is None else planner_gb / peak_gb,
        "timings_s": {"build": step.build_s, "fill": step.fill_s, "lower": step.lower_s, "compile": step.compile_s},
    }
