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
- moe: a MoE layer's routing (each token's top-k copies sorted, gathered, scattered back): `moe_passes` of those
  copies' bytes at the same rate; fitted to one measured shape (the MoE's kernels weren't profiled apart). With
  `dots` or `dots_and_attention` the backward runs the MoE's forward again (its ragged dots are no dot_general the
  policy keeps): the experts' flops once more, and MOE_RECOMPUTED of the routing (MOE_RECOMPUTED_SCANNED in a
  scan, whose MoE holds its experts in both of ragged_dot's layouts and transposes nothing:
  crosstune.train.jax.moe.WholeMoE). Scanned where fsdp splits the experts, each layer's own are copied out of
  the stack in both loops first: XLA feeds `ragged_dot` no slice in place (SCANNED_EXPERT_COPIES).
Calibrated on a TPU v5e (docs/BENCHMARKS.md, "TPU v5e chip, measured"): the efficiencies are the chip's; on v5p and
v6e the same fractions of their own peaks and bandwidths are assumed (the same MXU/VPU design, not measured there).
One calibration, at XLA's default scoped VMEM: a recipe's backend.jax.scoped_vmem_kib gets it too, and the
prediction says so. A profile with 96 MiB split the 31B's time otherwise (matmuls at 97 % of peak, more elementwise
passes) and, fitted to it, the rates put the 12B 14 % under what it ran with the option; the default's rates stay
within 10 % of both measured with it (31B +5.7 %, 12B −7.3 %: tests/planner/test_timing.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crosstune.planner.estimate import Plan
from crosstune.planner.memory import scan_slices_experts
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
    matmul: float  # the decoder layers' weight matmuls
    head: float  # the LM head's
    lora: float  # LoRA's rank-wide matmuls (bound by reading their inputs, counted on their flops)
    attention: dict  # "splash" | "dense" -> fraction of peak on the counted flops
    hbm: float
    passes: float  # elementwise bytes per token and layer, in units of the layer's activation widths
    head_passes: float  # elementwise bytes per token of the LM head, in units of the fp32 vocabulary row
    # a MoE layer's routing beyond its expert matmuls (sorting, gathering and scattering each token's top-k copies,
    # the grouped matmul's own overhead), in units of those copies' bytes: a fit to one shape (module docstring)
    moe_passes: float = 0.0


# The 26B-A4B's first 2 layers at 3072 tokens ran 0.1167 s per micro-step on the v5e where the terms above give
# 0.0836: the rest, 33.1 ms, is its routing, fitted as passes over the token copies (`plan --run` of
# recipes/gemma4-26b-a4b-tpu-v5p-8.yaml --layers 2; the same step at 4096 tokens checks it: docs/BENCHMARKS.md)
MOE_PASSES = 22.7
# The same 2 layers at 4096 tokens, scanned, ran 0.1917 s with dots_and_attention against 0.1731 s without (v5e,
# 2026-12-07, stop 62): 18.6 ms, of which the experts' forward flops are 4.7 (the `matmul` rate); the rest, 13.9,
# is 0.32 of the routing's 44.0 ms, fitted (the MoE forward's share of it: not profiled apart). That scan's MoE
# (ScannedMoE) has since been replaced (below): the term is the unrolled step's now, which its rows check (2 layers:
# 0.1744 s predicted, 0.1713 measured; 3 layers, stop 63: 0.2223, 0.2141)
MOE_RECOMPUTED = 0.32
# Scanned, a MoE layer holding its experts whole in both layouts (crosstune.train.jax.moe.WholeMoE) ran its 2
# layers at 4096 tokens in 0.1486 s, as unrolled (0.1486 s in the same call), and 0.1584 s with dots_and_attention
# (v5e, 2026-12-07, stop 63, `python bench/tpu_shapes.py --shape "recipes/gemma4-26b-a4b-tpu-v5p-8.yaml 2
# data.max_seq_len=4096 backend.jax.scan_layers=true [SET ...]"`): 9.8 ms, of which the experts' forward flops are
# 4.7; the rest is 0.116 of the routing, fitted. Its 3 layers with dots_and_attention check it: 0.1946 s measured.
MOE_RECOMPUTED_SCANNED = 0.116
# Where fsdp splits the experts, a scanned MoE layer first takes its own from the stack (each device its shard):
# read and written as one layer's, in the forward's loop and the backward's, 4 passes over their bytes. Forced on
# one chip, the 26B-A4B's 2 layers at 4096 tokens ran 18.2 ms over the whole stack's 0.1486 s (stop 63, the same
# command); 17.1 ms counted so at the `hbm` rate (stop 62's profile of those copies: 18.4 ms)
SCANNED_EXPERT_COPIES = 4

CALIBRATIONS: dict[str, Calibration] = {
    c.chip: c
    for c in (
        # `crosstune plan recipes/gemma4-31b-tpu-v5p-8.yaml --run --layers 4 --set data.max_seq_len=4096 --profile P`
        # on the chip (commit 974e99b), split by `python bench/tpu_profile_kinds.py P`: 130.9 ms of LM-head matmuls,
        # 187.3 of layer matmuls, 25.6 of LoRA matmuls, 19.9 of splash, 29.8 + 10.1 of elementwise fusions at 713
        # GB/s, of a 403.5 ms micro-step (docs/BENCHMARKS.md, "TPU v5e chip, measured")
        Calibration(
            chip="tpu-v5e",
            date="2026-12-05",
            command="plan --run --profile of the 31B's first 4 layers at 4096 tokens, bench/tpu_profile_kinds.py",
            matmul=0.851,
            head=0.896,
            lora=0.158,
            attention={"splash": 0.646, "dense": 0.851},  # dense: not measured, its batched matmuls at `matmul`'s
            hbm=0.871,
            passes=14.6,
            head_passes=1.68,
            moe_passes=MOE_PASSES,
        ),
    )
}
MEASURED_ON = "tpu-v5e"  # the calibration other chips borrow (module docstring)
# How far the prediction may be from the chip: every measured shape is within it (tests/planner/test_timing.py);
# two predictions closer than this are a tie for all the calibration can tell
CALIBRATED_WITHIN = 0.10


@dataclass(frozen=True)
class StepTime:
    by_kind_s: dict  # kind -> seconds per micro-step (work's kinds)
    calibration: str  # which chip's rates, and whether this chip was measured itself

    @property
    def micro_step_s(self) -> float:
        return sum(self.by_kind_s.values())

    def by_kind(self) -> dict[str, float]:
        return dict(self.by_kind_s)


def visited_blocks(length: int, window: int | None, block: int) -> int:
    """(q block, kv block) pairs a causal (within `window` tokens back, when given) splash mask keeps."""
    b = min(block, length)
    n = length // b
    if not window:
        return n * (n + 1) // 2
    reach = math.ceil((window - 1) / b)  # kv blocks before the diagonal a query block's window touches
    return sum(min(i, reach) + 1 for i in range(n))


def work(plan: Plan, recipe: Recipe) -> dict:
    """Per-device work of one micro-step of `recipe` on `plan` (its spec's layers), by kind (module docstring):
    flops for the matmul kinds and attention, HBM bytes for the elementwise kinds."""
    spec, (fsdp, tp), train = plan.spec, plan.jax_mesh, recipe.train
    rows, length, attention = train.per_device_batch_size * fsdp, recipe.data.max_seq_len, recipe.backend.jax.attention
    lora_rank, lora_targets = recipe.lora.rank, tuple(recipe.lora.targets)
    block, fused = min(recipe.backend.jax.splash_block, length), recipe.backend.jax.splash_fused_backward
    devices, tokens = fsdp * tp, rows * length
    a = 2 if train.precision == "bf16" else 4
    remat = train.gradient_checkpointing
    recompute_matmuls = remat and train.kernels.recomputes_matmuls
    recompute_experts = remat and not recompute_matmuls  # dots, dots_and_attention: the MoE's forward again
    d = spec.hidden_size
    matmul = lora = attention_flops = activation = routed = expert_bytes = 0.0
    for layer in range(spec.num_layers):
        shapes = spec.projection_shapes(layer)
        forward = 2.0 * sum(o * i for o, i in shapes.values()) + 4.0 * d * spec.per_layer_input_dim
        if spec.moe is not None:
            experts = 2.0 * spec.moe.top_k * spec.moe.expert_params(d)
            forward += 2.0 * spec.moe.num_experts * d + experts
            matmul += tokens * experts if recompute_experts else 0.0
            routed += tokens * spec.moe.top_k * (3 * d + 3 * spec.moe.expert_dim) * a  # each token's k copies
            expert_bytes += spec.moe.num_experts * spec.moe.expert_params(d) * a
        matmul += tokens * forward * (3 if recompute_matmuls else 2)
        lora += tokens * sum(6.0 * lora_rank * (shapes[t][0] + shapes[t][1]) for t in lora_targets if t in shapes)
        kind = spec.kind(layer)
        per_head = 2.0 * kind.head_dim * (block**2 if attention == "splash" else length**2)
        pairs = visited_blocks(length, kind.window, block) if attention == "splash" else 1
        count = SPLASH_MATMULS[fused] if attention == "splash" else DENSE_MATMULS
        recomputed = 2 if remat and train.kernels.recomputes_attention else 0  # the forward's 2 matmuls again
        attention_flops += rows * kind.num_heads * pairs * per_head * (count + recomputed)
        width = d + spec.mlp_dim(layer) + kind.q_dim + 2 * kind.kv_dim + spec.per_layer_input_dim
        activation += tokens * width * a
    cal = calibration(plan.hardware.chip.name)
    logits = tokens * spec.vocab_size * 4  # the fp32 logits of one pass over the rows
    lora_state = 4 * spec.lora_params(lora_rank, lora_targets) * 4  # fp32 params, grads, accumulator, moments
    scanned = recipe.backend.jax.scan_layers
    copies = SCANNED_EXPERT_COPIES * expert_bytes if scanned and scan_slices_experts(fsdp) else 0.0
    moe_recomputed = (MOE_RECOMPUTED_SCANNED if scanned else MOE_RECOMPUTED) if recompute_experts else 0.0
    return {
        "matmul": matmul / devices,
        "head": tokens * 4.0 * spec.vocab_size * d / devices,  # the logits and their gradient (one pass: logits.py)
        "lora": lora / devices,
        "attention": attention_flops / devices,
        "elementwise": (cal.passes * activation + lora_state) / devices,
        "head_elementwise": cal.head_passes * logits / devices,
        "moe": (cal.moe_passes * routed * (1 + moe_recomputed) + copies) / devices,
    }


def calibration(chip: str) -> Calibration:
    """The chip's own calibration, else the one measured (MEASURED_ON), whose fractions are assumed to carry."""
    return CALIBRATIONS.get(chip, CALIBRATIONS[MEASURED_ON])


def predict_step(plan: Plan, recipe: Recipe) -> StepTime:
    """The planner's time for one micro-step of `recipe` (the plan's) on its hardware (`plan.spec`'s layers)."""
    chip = plan.hardware.chip
    cal = calibration(chip.name)
    peak, bandwidth = chip.peak_bf16_tflops * 1e12, chip.hbm_bandwidth_gbs * GB
    rate = {
        "matmul": peak * cal.matmul,
        "head": peak * cal.head,
        "lora": peak * cal.lora,
        "attention": peak * cal.attention[recipe.backend.jax.attention],
        "elementwise": bandwidth * cal.hbm,
        "head_elementwise": bandwidth * cal.hbm,
        "moe": bandwidth * cal.hbm,
    }
    own = "measured on this chip" if cal.chip == chip.name else f"{cal.chip}'s fractions, assumed"
    if recipe.backend.jax.scoped_vmem_kib is not None:  # one calibration: XLA's default (module docstring)
        own += f"; at XLA's default scoped VMEM, not {recipe.backend.jax.scoped_vmem_kib} KiB"
    seconds = {kind: amount / rate[kind] for kind, amount in work(plan, recipe).items()}
    return StepTime(seconds, f"{cal.chip}, {cal.date} ({own}): {cal.command}")
