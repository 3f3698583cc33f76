"""The layouts a target allows for serving, and the one rule that picks one.

A layout is dp replicas × tp ranks filling every chip (vLLM's `--data-parallel-size` × `--tensor-parallel-size`):
each replica holds the whole model split over its tp chips and a KV cache of its own. Per layout: vLLM's head
verdict (`capacity.vllm_tp_layout`, the family spec's one head rule), weights and KV capacity per chip.

The rule (CHOICE_RULE): of the layouts that start (vLLM accepts the heads, the weights fit, one sequence of
max_model_len fits the KV cache), those that replicate no KV head; of those, the most KV tokens per chip. Only when
every layout that starts replicates KV heads is one of them chosen, by the same count. A replicated KV head is held
whole on every rank that holds it (weights and cache), and vLLM-TPU's JAX Gemma 4 splits such layers' K/V on
head_dim instead, warning of all-to-all traffic every layer (tpu-inference models/jax/gemma4.py): vLLM's TPU team
benchmarks Gemma 4 31B on v6e-8 as dp 2 × tp 4 (tpu-inference .buildkite/benchmark/cases/daily/).
"""

from __future__ import annotations

from dataclasses import dataclass

from crosstune.families.spec import ModelSpec
from crosstune.hardware import HardwareTarget
from crosstune.serve.capacity import Capacity, Paging, TpLayout, capacity, vllm_tp_layout, weight_bytes_per_rank
from crosstune.units import GIB, gb_to_gib

CHOICE_RULE = (
    "of the layouts that start, those replicating no KV head; of those, the most KV tokens per chip "
    "(a replicating layout only when every one that starts replicates)"
)
# Memory vLLM keeps outside weights and KV cache: activations of its profiling forward pass at the default
# --max-num-batched-tokens, CUDA graphs / XLA scratch. An assumption (vLLM measures it at start-up).
RESERVE_GIB = {"gpu": 3.0, "tpu": 2.0, "cpu": 0.0}


@dataclass(frozen=True)
class Layout:
    dp: int
    tp: int
    heads: TpLayout
    capacity: Capacity  # per chip of one replica, for the KV dtype that will be allocated
    refusal: str | None  # why vLLM would not start it; None: it starts

    @property
    def name(self) -> str:
        return f"dp {self.dp} × tp {self.tp}" if self.dp > 1 else f"tp {self.tp}"

    @property
    def starts(self) -> bool:
        return self.refusal is None

    @property
    def kv_tokens_per_chip(self) -> int:
        """Every chip of a replica holds its share of the replica's tokens: tokens held by all chips ÷ chips."""
        return self.capacity.kv_tokens // self.tp

    def sequences_total(self, length: int) -> int:
        return self.dp * self.capacity.sequences[length]


def kv_budget_gib(spec: ModelSpec, hw: HardwareTarget, tp: int, weight_dtype: str, utilization: float) -> float:
    """HBM × utilisation − weights per chip − the reserve: what vLLM has left for the KV cache on each chip."""
    hbm = gb_to_gib(hw.chip.hbm_gb)
    return hbm * utilization - weight_bytes_per_rank(spec, tp, weight_dtype) / GIB - RESERVE_GIB[hw.chip.platform]


def layout(
    spec: ModelSpec,
    hw: HardwareTarget,
    dp: int,
    tp: int,
    *,
    weight_dtype: str,
    kv_dtype: str,
    utilization: float,
    lengths: list[int],
    max_model_len: int,
    paging: Paging,
    budget_gib: float | None = None,
) -> Layout:
    """One layout's verdict and capacity; `budget_gib` overrides the HBM budget (the CPU's VLLM_CPU_KVCACHE_SPACE)."""
    heads = vllm_tp_layout(spec, tp)
    budget = kv_budget_gib(spec, hw, tp, weight_dtype, utilization) if budget_gib is None else budget_gib
    cap = capacity(
        spec,
        tp,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        kv_budget_gib=budget,
        lengths=sorted({*lengths, max_model_len}),
        paging=paging,
    )
    refusal = None
    if heads.errors:
        refusal = "; ".join(heads.errors)
    elif budget <= 0:
        hbm = gb_to_gib(hw.chip.hbm_gb)
        refusal = (
            f"weights {cap.weights_gib:.1f} GiB per chip + {RESERVE_GIB[hw.chip.platform]:.0f} GiB reserve exceed "
            f"{utilization:.0%} of {hbm:.1f} GiB HBM"
        )
    elif cap.sequences[max_model_len] < 1:
        refusal = f"not one sequence of max_model_len={max_model_len} fits the KV cache ({budget:.1f} GiB per chip)"
    return Layout(dp, tp, heads, cap, refusal)


def target_layouts(spec: ModelSpec, hw: HardwareTarget, **kwargs) -> list[Layout]:
    """Every dp × tp filling the target's chips, the widest tp first (one, tp 1, on CPU)."""
    chips = 1 if hw.chip.platform == "cpu" else hw.devices
    return [layout(spec, hw, chips // tp, tp, **kwargs) for tp in range(chips, 0, -1) if chips % tp == 0]


def _replication(spec: ModelSpec, tp: int) -> str:
    return ", ".join(
        f"the {name} layers' {spec.attention[name].num_kv_heads} KV heads ×{ranks}"
        for name, ranks in spec.kv_replication(tp).items()
        if ranks > 1
    )


def choose_layout(spec: ModelSpec, layouts: list[Layout]) -> tuple[Layout | None, str]:
    """CHOICE_RULE applied: the chosen layout (None if none starts) and why, in words."""
    starting = [lay for lay in layouts if lay.starts]
    if not starting:
        return None, "no layout starts"
    clean = [lay for lay in starting if not lay.heads.replicated]
    best = max(clean or starting, key=lambda lay: (lay.kv_tokens_per_chip, -lay.dp))
    others = [lay for lay in starting if lay.heads.replicated and lay is not best]
    if best.heads.replicated:
        why = f"every layout that starts replicates KV heads ({_replication(spec, best.tp)} here)"
    elif others:
        avoided = "; ".join(f"{lay.name} holds {_replication(spec, lay.tp)}" for lay in others)
        why = f"no KV head replicated ({avoided})"
    else:
        why = "no layout that starts replicates a KV head"
    return best, f"{why}; the most KV tokens per chip of those ({best.kv_tokens_per_chip:,})"


def why_not(spec: ModelSpec, lay: Layout, chosen: Layout | None) -> str:
    """Why `lay` is not the chosen layout, in words (its refusal when it would not start)."""
    if lay.refusal is not None:
        return f"won't start: {lay.refusal}"
    if chosen is None or lay is chosen:
        return ""
    ratio = lay.kv_tokens_per_chip / max(1, chosen.kv_tokens_per_chip)
    if lay.heads.replicated and not chosen.heads.replicated:
        return f"replicates {_replication(spec, lay.tp)} ({ratio:.2f}× the chosen layout's KV tokens per chip)"
    return f"fewer KV tokens per chip ({ratio:.2f}× the chosen layout's)"
