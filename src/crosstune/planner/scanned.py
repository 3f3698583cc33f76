"""What a scan over layer groups (crosstune.train.jax.layer_scan) holds for its backward with nothing recomputed:
every residual its body's linearization names, one [G, ...] stack per tensor of a group, all G groups' kept to
the backward's loop (crosstune.train.jax.remat's module docstring). Unrolled, XLA fuses the elementwise ones into
the backward and keeps far fewer (crosstune.planner.activations.layer_working_set); in a loop it cannot.

The terms are the residuals `jax.vjp` of the step (LoRA grads only) names in the scan's body, read per tensor with
its source line (2026-12-07, tunix's Gemma 3 and 4 models, crosstune's LoRA provider and splash; one v5e chip, the
31B's, Gemma 3 27B's and the 26B-A4B's first 2 layers): 6.49, 3.55 and 3.80 GB of residuals, each within 0.1 % of
the sum below (traced as tests/train/jax/test_scan_recompute.py reads saved residuals). Against the chip's peak,
base + LoRA + these + the larger of the loss's buffers and one layer's backward iteration (its working set): 12.99
GB for the 31B (12.87 measured), 9.58 for Gemma 3 (9.41). The 26B-A4B's, traced while its scanned MoE still
transposed its experts in the backward (11.19 GB with that copy in the iteration, 11.10 measured), holds them in
both layouts since (crosstune.train.jax.moe.WholeMoE; memory._second_layout): 13.03 against 13.19 measured
(2026-12-07, stop 63). XLA's total for a scanned step (arguments + temp_bytes) reads above its own peak
(peak_memory_in_bytes), which is what the chip holds: the 26B-A4B's 2 layers 14.79 GB against a 13.08 peak and
13.19 measured. Over fsdp 2 the planner is within 10 % of that peak (the 26B-A4B on v5p-8, 12 and 18 layers) and
grows per group as it does: no per-group term is missing (tests/planner/test_scanned_peak.py; other models over fsdp:
estimate.SCANNED_MEMORY_NOTE)."""

from __future__ import annotations

from crosstune.families.spec import ModelSpec
from crosstune.planner.activations import splash_residuals, split

# Bytes per element a scanned RMSNorm keeps: Gemma 4's (tunix gemma4 RMSNorm) upcasts its input to fp32 and keeps
# it and the normalized fp32 product (2 × 4); Gemma 3's computes in the input's dtype and keeps the input and the
# product (2 × a: None here)
NORM_BYTES: dict[str, int | None] = {"gemma4": 8, "gemma3": None}
# The MLP's [tokens, F] tensors kept (gelu's tanh form: its 4 intermediates, the gate's and up's outputs, their
# product); the down projection's dropped input comes beside them where down has LoRA dropout
MLP_TENSORS = 7


def _dropped(width: float, a: int, targets: tuple[str, ...], names: tuple[str, ...], dropout: bool) -> float:
    """Bytes per token of one LoRA module's dropout: its input's 1-byte mask and the dropped copy, where the module
    (one weight: q; k and v as tunix's one kv_einsum; gate; up; o; down) has a LoRA target and dropout is on."""
    return width * (a + 1) if dropout and any(t in targets for t in names) else 0.0


def scan_residuals(
    spec: ModelSpec, layer: int, b: int, seq: int, a: int, tp: int, targets: tuple[str, ...], dropout: bool
) -> float:
    """Bytes one layer's iteration of a scan saves for the backward with nothing recomputed (module docstring)."""
    k = spec.kind(layer)
    d, q = spec.hidden_size / tp, split(k.num_heads, tp) * k.head_dim
    kv = split(k.num_kv_heads, tp) * k.head_dim
    f = split(spec.mlp_dim(layer), tp)
    norm = NORM_BYTES.get(spec.family) or 2 * a
    d_norms = 4 + (3 if spec.moe is not None else 0)  # pre/post attention and MLP; a MoE layer's 3 around its experts
    per_token = norm * (d_norms * d + q + kv)  # and the q and k norms
    if spec.family == "gemma4":  # its v norm (no scale, in the input's dtype): the v projection and its normal
        per_token += 2 * kv * a
    per_token += 3 * kv * a  # splash's inputs in its layout: q below, k and v here
    per_token += q * a  # q in splash's layout; its output and logsumexp: splash_residuals
    per_token += MLP_TENSORS * f * a
    per_token += _dropped(d, a, targets, ("q",), dropout) + _dropped(d, a, targets, ("k", "v"), dropout)
    per_token += _dropped(d, a, targets, ("gate",), dropout) + _dropped(d, a, targets, ("up",), dropout)
    per_token += _dropped(q, a, targets, ("o",), dropout) + _dropped(f, a, targets, ("down",), dropout)
    if spec.per_layer_input_dim:  # the per-layer input's gate and product, as the working set counts them
        per_token += 2 * spec.per_layer_input_dim * a
    out = b * seq * per_token + splash_residuals(spec, layer, b, seq, a, tp)
    if spec.moe is not None:  # the router's fp32 input; each token's top-k copies: 7 [T·k, X/tp] as the MLP's, and
        m = spec.moe  # the experts' collected [T·k, D] output
        out += b * seq * (4 * d + m.top_k * (MLP_TENSORS * split(m.expert_dim, tp) + d) * a)
    return out
