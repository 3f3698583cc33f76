"""What vLLM does with a model's heads under tensor parallelism, and how much KV cache fits per chip.

vLLM's rules (vllm/model_executor/layers/linear.py QKVParallelLinear, config.verify_with_parallel_config):
- query heads must be divisible by tp;
- KV heads: if kv >= tp, kv must be divisible by tp (kv/tp per rank); if kv < tp, tp must be a multiple of kv and
  each KV head is *replicated* on tp/kv ranks (one head per rank) — weights and KV cache of those layers grow.
So Gemma 4 31B at tp=8 (4 KV heads on global layers) is served, with every global KV head held twice; the training
planner (`ModelSpec.tp_problems`) flags the same layers because Tunix/Qwix shard, not replicate.

KV cache per token per rank = Σ_layers 2 (K and V) · kv_heads_per_rank · head_dim · bytes. vLLM caches K and V
separately on Gemma 4's k_eq_v layers too (V is computed from K's weight, then normalised differently).
Sliding-window layers hold their window plus the tokens in flight per sequence where the engine's hybrid KV
allocator is on (GPU, CPU; `Paging`); vLLM-TPU force-disables it for Gemma 4: every layer holds the full context.
KV-shared layers (Gemma 4 E2B/E4B) read another layer's cache (vLLM's
kv_sharing_target_layer_name) and hold none, nor K/V weights. A MoE's experts are split over tp along their width
(vLLM's FusedMoE), which tp must divide.
"""

from __future__ import annotations

from dataclasses import dataclass

from crosstune.families.spec import ModelSpec
from crosstune.units import GIB

KV_BYTES = {"auto": 2, "bfloat16": 2, "float32": 4, "fp8": 1}
WEIGHT_BYTES = {"bfloat16": 2, "float32": 4}


@dataclass(frozen=True)
class TpLayout:
    tp: int
    errors: list[str]  # vLLM refuses to start
    replicated: list[str]  # KV heads vLLM replicates (served, at a memory cost)

    @property
    def ok(self) -> bool:
        return not self.errors


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """vLLM: kv/tp when kv >= tp, else 1 (the head replicated on tp/kv ranks)."""
    return num_kv_heads // tp if num_kv_heads >= tp else 1


def vllm_tp_layout(spec: ModelSpec, tp: int) -> TpLayout:
    """vLLM's verdict on tensor parallelism `tp` for every attention layer type of `spec` (the head rule is the
    family spec's, `ModelSpec.tp_problems(tp, replicate_kv=True)`), and on a MoE's expert width."""
    errors = spec.tp_problems(tp, replicate_kv=True)
    replicated = [
        f"{spec.attention[name].num_kv_heads} KV heads on {name} layers ({len(spec.layers_of(name))}): each "
        f"replicated on {ranks} ranks (their K/V weights and KV cache are {ranks}x what an even split would hold)"
        for name, ranks in spec.kv_replication(tp).items()
        if ranks > 1
    ]
    if spec.moe is not None and spec.moe.expert_dim % tp:
        errors.append(f"the {spec.moe.num_experts} experts' width {spec.moe.expert_dim} not divisible by tp={tp}")
    return TpLayout(tp, errors, replicated if not errors else [])


def vllm_tps(spec: ModelSpec, devices: int) -> list[int]:
    """The tp values dividing `devices` that vLLM accepts for `spec`."""
    return [t for t in range(1, devices + 1) if devices % t == 0 and vllm_tp_layout(spec, t).ok]


def weight_bytes_per_rank(spec: ModelSpec, tp: int, dtype: str) -> float:
    """Base weights one rank holds: q/o/MLP/experts/embeddings split by tp, K and V by KV heads per rank (replicated
    heads counted whole; vLLM materialises a V slot on k_eq_v layers too; KV-shared layers have none)."""
    d = spec.hidden_size
    total = spec.vocab_size * d / tp  # vocab-parallel embedding, tied LM head
    if not spec.tied_embeddings:
        total *= 2
    p = spec.per_layer_input_dim  # per-layer inputs: the table, the model projection, each layer's gate/projection
    total += (spec.per_layer_embedding_params + spec.num_layers * p * d) / tp
    for layer in range(spec.num_layers):
        a = spec.kind(layer)
        total += sum(o * i for t, (o, i) in spec.projection_shapes(layer).items() if t not in ("k", "v")) / tp
        if not spec.kv_shared(layer):
            total += 2 * kv_heads_per_rank(a.num_kv_heads, tp) * a.head_dim * d
        total += 4 * d + 2 * a.head_dim + 2 * d * p / tp  # norms, whole on every rank
        if spec.moe is not None:  # the experts split along their width; the router whole
            total += spec.moe.num_experts * (spec.moe.expert_params(d) / tp + d)
    return total * WEIGHT_BYTES[dtype]


@dataclass(frozen=True)
class Paging:
    """How the engine pages a sequence's KV cache (vLLM's admission rule, v1/kv_cache_interface.py): whole blocks of
    `block` tokens per layer; a sliding layer holds its window − 1 plus the tokens in flight (scheduled, not yet
    freed), plus one block, at most the sequence (SlidingWindowSpec.max_admission_blocks_per_request).
    `sliding_in_flight` None: sliding layers hold the whole sequence (vLLM-TPU for Gemma 4; a full-attention budget)."""

    block: int = 1
    sliding_in_flight: int | None = None


FULL = Paging()  # every layer holds every token, no block rounding


def kv_bytes_per_sequence(spec: ModelSpec, tp: int, tokens: int, kv_dtype: str, paging: Paging = FULL) -> float:
    """KV-cache bytes one rank holds for one sequence of `tokens` tokens."""
    total = 0.0
    b = paging.block
    for layer in range(spec.num_layers):
        if spec.kv_shared(layer):
            continue
        a = spec.kind(layer)
        if a.window and paging.sliding_in_flight is not None:
            blocks = -(-min(tokens, a.window - 1 + paging.sliding_in_flight) // b) + (1 if b > 1 else 0)
        else:
            blocks = -(-tokens // b)
        total += 2 * kv_heads_per_rank(a.num_kv_heads, tp) * a.head_dim * KV_BYTES[kv_dtype] * blocks * b
    return total


def kv_bytes_per_token(spec: ModelSpec, tp: int, kv_dtype: str) -> float:
    """Per rank, per token, with every layer holding it (a full-attention budget)."""
    return kv_bytes_per_sequence(spec, tp, 1, kv_dtype, FULL)


@dataclass(frozen=True)
class Capacity:
    kv_dtype: str
    weights_gib: float  # per chip
    kv_budget_gib: float  # per chip, after weights and the reserve
    kv_tokens: int  # per chip: tokens every layer can hold
    sequences: dict[int, int]  # sequence length (prompt + output) -> concurrent sequences that fit
    # vLLM's own start-up report for the longest length (max_model_len): "Maximum concurrency for N tokens per
    # request: C x", and "KV cache size: int(C × N) tokens" (v1/core/kv_cache_utils.py get_kv_cache_capacity)
    max_concurrency: float = 0.0

    @property
    def engine_tokens(self) -> int:
        return int(self.max_concurrency * max(self.sequences))


def capacity(
    spec: ModelSpec,
    tp: int,
    *,
    weight_dtype: str,
    kv_dtype: str,
    kv_budget_gib: float,
    lengths: list[int],
    paging: Paging,
) -> Capacity:
    """KV capacity per chip for a KV budget of `kv_budget_gib` (what is left of HBM × utilisation after weights
    and the reserve on an accelerator; VLLM_CPU_KVCACHE_SPACE on CPU)."""
    budget = max(0.0, kv_budget_gib)
    per_token = kv_bytes_per_token(spec, tp, kv_dtype)
    per_seq = {n: kv_bytes_per_sequence(spec, tp, n, kv_dtype, paging) for n in sorted(lengths)}
    seqs = {n: int(budget * GIB // b) for n, b in per_seq.items()}
    weights = weight_bytes_per_rank(spec, tp, weight_dtype) / GIB
    longest = per_seq[max(per_seq)]
    return Capacity(kv_dtype, weights, budget, int(budget * GIB // per_token), seqs, budget * GIB / longest)
