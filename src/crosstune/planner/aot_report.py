"""XLA's word on a recipe's train step, next to the planner's estimate, and the roofline it implies.

`CompiledStep` holds what `crosstune plan --compile` measured: the step compiled ahead of time for the target's TPU
topology (crosstune.train.jax.aot_process), XLA's memory_analysis (bytes per device) and cost_analysis (flops and bytes
accessed per device and micro-step) and the optimized HLO's collectives and Pallas custom calls (crosstune.planner.hlo).
Here only arithmetic on those numbers: the per-device total, the roofline with three terms per micro-step — compute
(flops / bf16 peak), HBM (bytes / bandwidth) and ICI (collective bytes / interconnect bandwidth), the step taking
the longest of them (an upper bound on speed: as if the three overlapped perfectly and the host cost nothing) —
and the JSON object the command prints. A Pallas kernel's work is invisible to cost_analysis: its flops and bytes
come from the model's own count of what the kernel computes (`kernel_flops`, `kernel_bytes`; train/jax/attention).
cost_analysis counts a while loop's body once (a scanned step's: one group of layers): what its later runs do is
counted apart (`loop_flops`, `loop_bytes`; crosstune.planner.loops).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from crosstune.families import get_family
from crosstune.families.spec import ModelSpec
from crosstune.hardware import Chip
from crosstune.planner.estimate import Plan
from crosstune.planner.memory import Memory
from crosstune.units import GB

ROOFLINE_NOTE = (
    "an upper bound: max(flops / bf16 peak, bytes accessed / HBM bandwidth, collective bytes / ICI bandwidth) per "
    "micro-step, as if compute, memory traffic and collectives overlapped perfectly (each collective at the chip's "
    "whole bidirectional ICI bandwidth) and the host and the input pipeline cost nothing"
)

SCANNED_NOTE = (
    "none: the layers run as a scan (backend.jax.scan_layers) and XLA's cost_analysis counts a loop's body once; "
    "this record (a compile from before crosstune counted the loop's other runs) has no count of them: compile it "
    "again"
)


def held(total_bytes: int, peak_bytes: int) -> tuple[int, str]:
    """(what a compiled step holds on a device, which of XLA's figures that is): its peak (peak_memory_in_bytes)
    where XLA reported one, else its memory_analysis total. On a v5e chip XLA's peak is what the chip held and the
    total is not: scanned, the 31B's 2 layers peaked at 12.81 GB by XLA, 12.87 measured, 14.11 by the total; the
    26B-A4B's 13.08, 13.19, 14.79 (a scan's temp_bytes reads above its buffer assignment's); unrolled, the two agree
    (docs/BENCHMARKS.md, "A scan's XLA total is not its peak")."""
    return (peak_bytes, "peak") if peak_bytes > 0 else (total_bytes, "total")


@dataclass(frozen=True)
class CompiledStep:
    """XLA's analyses of one train micro-step compiled for a TPU topology (per device unless named otherwise)."""

    topology: str
    device_kind: str
    devices: int
    layers: int  # decoder layers compiled
    model_layers: int  # decoder layers of the model
    micro_batch_tokens: int  # tokens per micro-step over all devices (rows × max_seq_len)
    accumulation: int  # micro-steps per optimizer step
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    generated_code_bytes: int
    flops: float
    bytes_accessed: float
    build_s: float
    lower_s: float
    compile_s: float
    host_peak_rss_bytes: int
    collective_bytes: float = 0.0  # per device, moved over ICI by the program's collectives (planner.hlo)
    collectives: dict = dataclasses.field(default_factory=dict)  # planner.hlo.Collectives.as_dict()
    kernel_flops: float = 0.0  # Pallas kernels' work, counted from the model (cost_analysis has none of it)
    kernel_bytes: float = 0.0
    kernel_note: str = ""  # which kernels, and how their work was counted
    scanned: bool = False  # the layers a lax.scan (backend.jax.scan_layers): cost_analysis counts its body once
    loop_flops: float = 0.0  # the while loops' runs after their first, which cost_analysis leaves out (planner.loops)
    loop_bytes: float = 0.0
    loops_counted: bool = False  # loop_flops and loop_bytes were counted (a record from before has neither)
    uncounted_loops: int = 0  # loops with work and no trip count in the HLO: counted once
    # XLA's peak_memory_in_bytes: what its buffer assignment holds at once at the peak; 0 in a record from before.
    # Below per_device_bytes for a scan, whose temp_bytes XLA reports above what the chip holds (docs/BENCHMARKS.md)
    peak_bytes: int = 0

    @property
    def per_device_bytes(self) -> int:
        """XLA's memory_analysis total: its arguments, the outputs that don't reuse an argument's buffer, its
        temporaries and its code. Not what the step holds at once where the layers are scanned: see held_bytes."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes + self.generated_code_bytes

    @property
    def held_bytes(self) -> int:
        """What the step holds on a device, the figure every fit verdict reads (crosstune.planner.aot_report.held)."""
        return held(self.per_device_bytes, self.peak_bytes)[0]

    @property
    def held_by(self) -> str:
        """Which of XLA's figures held_bytes is: "peak", or "total" where XLA reported none (an older record)."""
        return held(self.per_device_bytes, self.peak_bytes)[1]

    @property
    def full_depth(self) -> bool:
        return self.layers == self.model_layers

    @property
    def total_flops(self) -> float:
        return self.flops + self.loop_flops + self.kernel_flops

    @property
    def total_bytes(self) -> float:
        return self.bytes_accessed + self.loop_bytes + self.kernel_bytes

    @property
    def roofline_note(self) -> str | None:
        """Why the step's cost can't give a roofline (its loops' work unknown), or None where it can."""
        if self.uncounted_loops:
            return (
                f"none: {self.uncounted_loops} while loop(s) with work and no trip count in the optimized HLO: "
                "XLA's cost_analysis counts each body once, and how many times it runs is unknown"
            )
        if self.scanned and not self.loops_counted:
            return SCANNED_NOTE
        return None

    @classmethod
    def from_dict(cls, d: dict) -> CompiledStep:
        fields = dataclasses.fields(cls)
        required = {f.name for f in fields if f.default is f.default_factory is dataclasses.MISSING}
        return cls(**{f.name: d[f.name] for f in fields if f.name in d or f.name in required})


@dataclass(frozen=True)
class Roofline:
    compute_s: float  # per micro-step
    memory_s: float
    ici_s: float
    micro_step_s: float
    step_s: float  # per optimizer step (accumulation × micro-step)
    tokens_per_s: float  # over the whole slice
    micro_batch_tokens: int

    @property
    def bound(self) -> str:
        terms = {"compute": self.compute_s, "memory": self.memory_s, "ICI": self.ici_s}
        return max(terms, key=terms.__getitem__)

    def tokens_per_s_of(self, seconds: float) -> float | None:
        """tokens/s if that term alone set the step time."""
        return self.micro_batch_tokens / seconds if seconds > 0 else None

    def times(self) -> dict:
        """The three terms, the step they set and its speed, as the JSON reports print them."""
        return {
            "compute_s": self.compute_s,
            "memory_s": self.memory_s,
            "ici_s": self.ici_s,
            "micro_step_s": self.micro_step_s,
            "step_s": self.step_s,
            "tokens_per_s": self.tokens_per_s,
            "bound": self.bound,
        }


def roofline(step: CompiledStep, chip: Chip) -> Roofline:
    """The fastest the compiled step could run on `chip` (every device runs the same SPMD program)."""
    if chip.peak_bf16_tflops is None or chip.hbm_bandwidth_gbs is None:
        raise ValueError(f"{chip.name}: no bf16 peak or HBM bandwidth in crosstune.hardware: no roofline")
    compute = step.total_flops / (chip.peak_bf16_tflops * 1e12)
    memory = step.total_bytes / (chip.hbm_bandwidth_gbs * GB)
    ici = step.collective_bytes / (chip.ici_bandwidth_gbs * GB) if chip.ici_bandwidth_gbs else 0.0
    micro = max(compute, memory, ici)
    tokens = step.micro_batch_tokens
    return Roofline(compute, memory, ici, micro, micro * step.accumulation, tokens / micro, tokens)


def with_layers(spec: ModelSpec, layers: int | None) -> ModelSpec:
    """The model's first `layers` decoder layers (same widths, same layer pattern from the start; KV-shared layers
    at about the size's fraction, `Family.shallow_kv_shared`)."""
    if layers is None or layers == spec.num_layers:
        return spec
    if not 1 <= layers <= spec.num_layers:
        raise ValueError(f"--layers {layers}: {spec.name} has {spec.num_layers} decoder layers (1..{spec.num_layers})")
    types = spec.layer_types[:layers]
    shared = get_family(spec.family).shallow_kv_shared(spec, types)
    return dataclasses.replace(
        spec, name=f"{spec.name} (first {layers} layers)", layer_types=types, kv_shared_layers=shared
    )


def planner_bytes(m: Memory) -> dict:
    return {
        "per_device_bytes": round(m.total * GB),
        "base_bytes": round(m.base * GB),
        "lora_optimizer_bytes": round(m.lora * GB),
        "gathered_bytes": round(m.gathered * GB),
        "activations_bytes": round(m.activations * GB),
        "logits_bytes": round(m.logits * GB),
    }


def compile_report(plan: Plan, step: CompiledStep) -> dict:
    """The object `crosstune plan --compile --json` prints. `plan` is the planner's for the compiled layers."""
    chip = plan.hardware.chip
    hbm = None if chip.hbm_gb is None else round(chip.hbm_gb * GB)
    usable = None if chip.usable_gb is None else round(chip.usable_gb * GB)
    xla, held = step.per_device_bytes, step.held_bytes
    line = None if step.roofline_note else roofline(step, chip)
    return {
        "recipe": plan.recipe_name,
        "hardware": plan.hardware.name,
        "topology": step.topology,
        "device_kind": step.device_kind,
        "devices": step.devices,
        "mesh": {"fsdp": plan.jax_mesh[0], "tp": plan.jax_mesh[1]},
        "layers": {"compiled": step.layers, "model": step.model_layers, "full_depth": step.full_depth},
        "hbm_bytes_per_device": hbm,
        "usable_bytes_per_device": usable,
        "fits": usable is None or held <= usable,
        "fits_by": step.held_by,  # XLA's "peak" (xla.peak_bytes) or "total" (xla.per_device_bytes)
        "held_bytes_per_device": held,
        "xla": {
            "per_device_bytes": xla,
            "argument_bytes": step.argument_bytes,
            "output_bytes": step.output_bytes,
            "alias_bytes": step.alias_bytes,
            "temp_bytes": step.temp_bytes,
            "peak_bytes": step.peak_bytes or None,
            "generated_code_bytes": step.generated_code_bytes,
            "output_fraction_of_arguments": step.output_bytes / step.argument_bytes,
            "flops": step.flops,
            "bytes_accessed": step.bytes_accessed,
            "collective_bytes": step.collective_bytes,
            "collectives": step.collectives,
            "kernel_flops": step.kernel_flops,
            "kernel_bytes": step.kernel_bytes,
            "kernel_note": step.kernel_note,
            "loop_flops": step.loop_flops,
            "loop_bytes": step.loop_bytes,
            "loops_counted": step.loops_counted,
            "uncounted_loops": step.uncounted_loops,
        },
        "planner": {
            **planner_bytes(plan.jax_memory),
            "relative_to_xla": plan.jax_memory.total * GB / xla - 1,
            "relative_to_xla_peak": plan.jax_memory.total * GB / step.peak_bytes - 1 if step.peak_bytes else None,
        },
        "roofline": None
        if line is None
        else {
            **line.times(),
            "tokens_per_s_by_term": {
                "compute": line.tokens_per_s_of(line.compute_s),
                "memory": line.tokens_per_s_of(line.memory_s),
                "ici": line.tokens_per_s_of(line.ici_s),
            },
            "micro_batch_tokens": step.micro_batch_tokens,
            "accumulation": step.accumulation,
            "note": ROOFLINE_NOTE
            + ("; each while loop's body counted for every run" if step.loop_flops else "")
            + ("" if step.full_depth else f"; for the first {step.layers} layers only, not the whole model"),
        },
        "roofline_note": step.roofline_note,
        "timings_s": {"build": step.build_s, "lower": step.lower_s, "compile": step.compile_s},
        "host_peak_rss_bytes": step.host_peak_rss_bytes,
    }
