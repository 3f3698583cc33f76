"""The activation terms of the planner's memory model, per layer and per device (crosstune.planner.estimate sums
them): a layer's working set, what each recompute mode keeps, and the loss's logits. Why each is what it is:
docs/DESIGN_NOTES.md, "crosstune.planner.estimate and crosstune.planner.memory"."""

from __future__ import annotations

from crosstune.families.spec import ModelSpec

JAX_LOGITS_CHUNK = 512  # crosstune.train.jax.logits.CHUNK (a test keeps the two equal)


def layer_working_set(
    spec: ModelSpec, layer: int, b: int, seq: int, a: int, tp: int, scores: bool, mlp_copies: int = 4
) -> float:
    """Bytes one layer holds for its backward with nothing recomputed: b rows of `seq` tokens, `a` bytes per value,
    heads over tp; `scores` where dense attention keeps its fp32 [b, heads, L, L]."""
    k = spec.kind(layer)
    qh, kvh = split(k.num_heads, tp), split(k.num_kv_heads, tp)
    f = split(spec.mlp_dim(layer), tp)
    tokens = b * seq
    out = 8 * tokens * spec.hidden_size / tp * a + tokens * (2 * qh + 2 * kvh) * k.head_dim * a
    out += mlp_copies * tokens * f * a
    out += 2 * tokens * spec.per_layer_input_dim * a  # the per-layer input's gate and its product
    if spec.moe is not None:  # each token's top-k copies: gate/up and their product [.., X], and 3 [.., D], fitted:
        # XLA's remat-off compiles of the 26B-A4B on v5p-8 grow 0.66-0.70 GB per layer (6, 12, 30 layers), one [T·k, D]
        # bf16 more than 2 (−10.3 % at full depth then, −0.5 % now). Its buffers hold both fsdp rows' token copies
        # at D and D/tp (docs/BENCHMARKS.md); the third copy stands in for that
        m = spec.moe
        out += tokens * m.top_k * (3 * spec.hidden_size + 3 * split(m.expert_dim, tp)) * a
        out += tokens * m.num_experts * 4 * 2  # fp32 router scores and probabilities
    if scores:  # one fp32 [b, heads, L, L] per layer: XLA's remat-off compile of the 31B (temp 33.05 GB at 60 layers)
        out += b * qh * seq * seq * 4
    return out


def split(n: int, tp: int) -> float:
    """n over tp where tp divides it, else n whole (kept on every tp rank)."""
    return n / tp if n % tp == 0 else n


def splash_residuals(spec: ModelSpec, layer: int, b: int, seq: int, a: int, tp: int) -> float:
    """Bytes of the splash kernel's residuals per layer: its output and its fp32 logsumexp."""
    k = spec.kind(layer)
    return b * seq * split(k.num_heads, tp) * (k.head_dim * a + 4)


def saved_matmuls(spec: ModelSpec, layer: int, b: int, seq: int, a: int, tp: int, lora: tuple[str, ...]) -> float:
    """Bytes the `dots` remat keeps per layer: the output of every weight matmul (q, k, v, o, gate, up, down), and
    for each LoRA target the B matmul's output beside it, as wide (a dot of its own, saved before the sum)."""
    k = spec.kind(layer)
    widths = {
        "q": split(k.num_heads, tp) * k.head_dim,
        "k": split(k.num_kv_heads, tp) * k.head_dim,
        "v": 0 if k.k_eq_v else split(k.num_kv_heads, tp) * k.head_dim,
        "o": spec.hidden_size / tp,
        "gate": split(spec.mlp_dim(layer), tp),
        "up": split(spec.mlp_dim(layer), tp),
        "down": spec.hidden_size / tp,
    }
    return b * seq * sum(w * (2 if t in lora else 1) for t, w in widths.items()) * a


def kept_in_working_set(spec: ModelSpec, layer: int, b: int, seq: int, a: int, tp: int) -> float:
    """Bytes of a layer's working set that `dots` already keeps: the q, k and v projections and the MLP's gate and
    up (2 of its 3 [tokens, F] tensors), counted once in the saved matmuls and not again where the layer's backward
    recomputes the rest (the 31B's 4 layers on the v5e chip with dots_and_attention: 13.43 GB measured, 14.83 counting
    them twice; docs/BENCHMARKS.md)."""
    k = spec.kind(layer)
    heads = split(k.num_heads, tp) + split(k.num_kv_heads, tp) * (1 if k.k_eq_v else 2)
    return b * seq * (heads * k.head_dim + 2 * split(spec.mlp_dim(layer), tp)) * a


def saved_attention(spec: ModelSpec, b: int, seq: int, a: int) -> float:
    """Bytes selective recompute (torch: no tp) keeps per model: every layer's attention output and fp32
    logsumexp, what splash's residuals are on jax."""
    return sum(splash_residuals(spec, i, b, seq, a, 1) for i in range(spec.num_layers))


def logits_bytes(spec: ModelSpec, b: int, seq: int, tp: int, backend: str) -> float:
    """Bytes per device the loss holds beside the layers."""
    vocab_tp = tp if spec.vocab_size % tp == 0 else 1
    if backend == "jax":  # crosstune.train.jax.logits: a chunk at a time (2 fp32 + 1 bf16 [rows, chunk, vocab] buffers
        # in XLA's buffer assignment: the logits, their gradient, the head's bf16 output), the hidden states' grad
        chunk = b * min(seq, JAX_LOGITS_CHUNK) * spec.vocab_size / vocab_tp
        return chunk * (2 * 4 + 2) + b * seq * spec.hidden_size * 4
    # fp32 [b, L, vocab]: the logits, their softmax's gradient, and with a final softcap the capped logits too
    # (Gemma 4: 30; Gemma 3 has none; XLA's full-depth compiles of both agreed before the chunked jax loss)
    copies = 3 if spec.final_logit_softcap else 2
    return b * seq * spec.vocab_size * 4 * copies / vocab_tp
