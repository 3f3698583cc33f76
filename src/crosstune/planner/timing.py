"""The planner's step time: the jax micro-step's work counted per kind from the model and the recipe, each kind
at the rate a chip was measured to run it (CALIBRATIONS), summed (a TPU runs one fusion at a time: a matmul fusion,
the attention kernel and the elementwise fusions take turns, they don't overlap).

Kinds of work, per device and micro-step (rows split over fsdp, heads and widths over tp):
- matmul: the weight matmuls forward and backward to the activations (the frozen weights get no gradient), plus
  the forward again where activations are recomputed, plus LoRA's own matmuls (forward, and backward to both the
  input and A, B); the LM head forward and its gradient (crosstune.train.jax.logits computes both in one pass);
  the MoE's experts. Rate: `matmul` × the chip's bf16 peak.
- attention: what the kernel computes. Splash visits the (q block, kv block) pairs its causal or local mask keeps
  (backend.jax.splash_block), 2 matmuls forward and 5 in its fused backward per pair (7 in two passes);
  dense attention computes all L² scores (2 forward, 4 backward). Rate: `attention[kind]` × peak.
- elementwise: norms, RoPE, GeGLU, softcaps, residuals, casts, LoRA's dropout and scaling, the loss's softmax, the
  optimizer: HBM bytes counted as `passes` reads/writes of each layer's activation widths (hidden, MLP, attention
  projections, per-layer inputs) per token, `head_passes` of the fp32 logits, and the LoRA state's bytes; rate:
  `hbm` × the chip's HBM bandwidth.
Calibrated on a TPU v5e (docs/BENCHMARKS.md, "TPU v5e chip, measured"): the efficiencies are the chip's; on v5p and
v6e the same fractions of their own peaks and bandwidths are assumed (the same MXU/VPU design, not measured there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crosstune.planner.estimate import Plan
from crosstune.recipe import Recipe
from crosstune.units import GB

# matmuls per visited block pair (crosstune.train.jax.attention.MATMULS): forward q·kᵀ, p·v; the fused backward's
# five, or the unfused dkv's four and dq's three
SPLASH_MATMULS = {True: 2 + 5, False: 2 + 4 + 3}
DENSE_MATMULS = 2 + 4


@dataclass(frozen=True)
class Calibration:
    """Measured rates of one chip, each a fraction of its published peak (matmul, attention) or HBM bandwidth."""

    chip: str
    date: str
    command: str
    matmul: float
    attention: dict  # "splash" | "dense" -> fraction of peak on the counted flops
    hbm: float
    passes: float  # elementwise bytes per token and layer, in units of the layer's activation widths
    head_passes: float  # elementwise bytes per token of the LM head, in units of the fp32 vocabulary row


CALIBRATIONS: dict[str, Calibration] = {
    c.chip: c
    for c in (
        Calibration(
            chip="tpu-v5e",
            date="uncalibrated",
            command="none: the roofline (every kind at its peak)",
            matmul=1.0,
            attention={"splash": 1.0, "dense": 1.0},
            hbm=1.0,
            passes=0.0,
            head_passes=0.0,
        ),
    )
}
MEASURED_ON = "tpu-v5e"  # the calibration other chips borrow (module docstring)


@dataclass(frozen=True)
class StepTime:
    matmul_s: float
    attention_s: float
    elementwise_s: float
    calibration: str  # which chip's rates, and whether this chip was measured itself

    @property
    def micro_step_s(self) -> float:
        return self.matmul_s + self.attention_s + self.elementwise_s

    def by_kind(self) -> dict[str, float]:
        return {"matmul": self.matmul_s, "attention": self.attention_s, "elementwise": self.elementwise_s}


def visited_blocks(length: int, window: int | None, block: int) -> int:
    """(q block, kv block) pairs a causal (within `window` tokens back, when given) splash mask keeps."""
    b = min(block, length)
    n = length // b
    if not window:
        return n * (n + 1) // 2
    reach = math.ceil((window - 1) / b)  # kv blocks before the diagonal a query block's window touches
    return sum(min(i, reach) + 1 for i in range(n))


def work(plan: Plan, recipe: Recipe) -> dict:
    """Per-device work of one micro-step of `recipe` on `plan` (its spec's layers): matmul flops, attention flops,
    elementwise bytes (module docstring)."""
    spec, (fsdp, tp), train = plan.spec, plan.jax_mesh, recipe.train
    rows, length, attention = train.per_device_batch_size * fsdp, recipe.data.max_seq_len, recipe.backend.jax.attention
    lora_rank, lora_targets = recipe.lora.rank, tuple(recipe.lora.targets)
    block, fused = min(recipe.backend.jax.splash_block, length), recipe.backend.jax.splash_fused_backward
    devices, tokens = fsdp * tp, rows * length
    a = 2 if train.precision == "bf16" else 4
    remat = train.gradient_checkpointing
    recompute_matmuls = remat and train.kernels.recomputes_matmuls
    d = spec.hidden_size
    matmul = attention_flops = activation = 0.0
    for layer in range(spec.num_layers):
        shapes = spec.projection_shapes(layer)
        forward = 2.0 * sum(o * i for o, i in shapes.values()) + 4.0 * d * spec.per_layer_input_dim
        if spec.moe is not None:
            forward += 2.0 * (spec.moe.num_experts * d + spec.moe.top_k * spec.moe.expert_params(d))
        lora = sum(6.0 * lora_rank * (shapes[t][0] + shapes[t][1]) for t in lora_targets if t in shapes)
        matmul += tokens * (forward * (3 if recompute_matmuls else 2) + lora)
        kind = spec.kind(layer)
        per_head = 2.0 * kind.head_dim * (block**2 if attention == "splash" else length**2)
        pairs = visited_blocks(length, kind.window, block) if attention == "splash" else 1
        count = SPLASH_MATMULS[fused] if attention == "splash" else DENSE_MATMULS
        attention_flops += rows * kind.num_heads * pairs * per_head * (count + (2 if remat else 0))
        width = d + spec.mlp_dim(layer) + kind.q_dim + 2 * kind.kv_dim + spec.per_layer_input_dim
        activation += tokens * width * a
    head = tokens * 4.0 * spec.vocab_size * d
    cal = calibration(plan.hardware.chip.name)
    lora_bytes = 4 * spec.lora_params(lora_rank, lora_targets) * 4  # fp32 params, grads, accumulator, moments
    elementwise = cal.passes * activation + cal.head_passes * tokens * spec.vocab_size * 4 + lora_bytes
    return {"matmul": (matmul + head) / devices, "attention": attention_flops / devices,
            "elementwise": elementwise / devices}  # fmt: skip


def calibration(chip: str) -> Calibration:
    """The chip's own calibration, else the one measured (MEASURED_ON), whose fractions are assumed to carry."""
    return CALIBRATIONS.get(chip, CALIBRATIONS[MEASURED_ON])


def predict_step(plan: Plan, recipe: Recipe) -> StepTime:
    """The planner's time for one micro-step of `recipe` (the plan's) on its hardware (`plan.spec`'s layers)."""
    r, chip = recipe, plan.hardware.chip
    w = work(plan, r)
    cal = calibration(chip.name)
    peak, bandwidth = chip.peak_bf16_tflops * 1e12, chip.hbm_bandwidth_gbs * GB
    own = "measured on this chip" if cal.chip == chip.name else f"{cal.chip}'s fractions, assumed"
    return StepTime(
        matmul_s=w["matmul"] / (peak * cal.matmul),
        attention_s=w["attention"] / (peak * cal.attention[r.backend.jax.attention]),
        elementwise_s=w["elementwise"] / (bandwidth * cal.hbm),
        calibration=f"{cal.chip}, {cal.date} ({own}): {cal.command}",
    )
