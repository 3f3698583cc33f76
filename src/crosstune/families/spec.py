"""Backend-neutral description of a Gemma-family decoder: shapes, parameter counts and FLOPs.

Everything that needs a shape (planner, cost model, exporter, tiny models, MFU) asks a `ModelSpec`. Besides the
dense 31B layout it holds the rest of the Gemma 4 family: per-layer input embeddings and KV-shared layers (E2B,
E4B: the last `kv_shared_layers` layers reuse the keys and values of an earlier layer and have no k/v projections)
and the mixture of experts beside the dense MLP (26B-A4B). `unified` marks the 12B's transformers architecture
(`gemma4_unified`): the same decoder layers under other class names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# Bytes per element of the model dtypes a recipe names (the planner's memory, an import's QLoRA line).
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
# Backend-neutral LoRA targets, as written in recipes.
NEUTRAL_TARGETS: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
# LoRA on a mixture of experts' fused expert weights: a recipe may name it, and is refused with this reason (on a MoE
# model the MLP targets adapt the dense branch beside the experts; docs/BACKEND_EQUIVALENCE.md).
EXPERTS_TARGET = "experts"
EXPERTS_REFUSED = (
    "LoRA on the MoE experts is not offered: PEFT 0.21 could adapt transformers' fused experts "
    "(target_parameters), but tunix 0.1.7 runs them through jax.lax.ragged_dot, which qwix 0.1.8's LoRA does not "
    "intercept (it adapts einsum, dot_general and conv weights), so the jax backend would train a different adapter"
)


@dataclass(frozen=True)
class AttentionKind:
    """One attention layer type (e.g. Gemma 4's sliding vs global layers differ in every field)."""

    name: str  # "sliding" | "global"
    num_heads: int
    num_kv_heads: int
    head_dim: int
    window: int | None = None  # sliding window in tokens; None = full causal attention
    k_eq_v: bool = False  # keys reused as values: the layer has k_proj and no v_proj

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim


@dataclass(frozen=True)
class MoE:
    """A mixture-of-experts block beside each layer's dense MLP (Gemma 4 26B-A4B): a softmax router picks `top_k`
    of `num_experts` GeGLU experts of width `expert_dim` per token."""

    num_experts: int
    top_k: int
    expert_dim: int

    def expert_params(self, hidden: int) -> int:
        """One expert's weights: fused gate/up [2·F, D] and down [D, F]."""
        return 3 * self.expert_dim * hidden


def layer_period(types: Sequence) -> int:
    """The smallest P with at least 2 complete groups whose layers' attention types repeat every P layers; all the
    layers (one group, a scan of length 1) when none repeats (a model cut to a few layers, `plan --layers`). A scan
    over layer groups (crosstune.train.jax.layer_scan) runs one group of P layers per iteration."""
    n = len(types)
    for p in range(1, n // 2 + 1):
        if all(types[i] == types[i % p] for i in range((n // p) * p)):
            return p
    return n


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of one model size. `layer_types[i]` names the AttentionKind of decoder layer i."""

    family: str
    name: str
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    layer_types: tuple[str, ...]
    attention: dict[str, AttentionKind] = field(hash=False)
    tied_embeddings: bool = True
    final_logit_softcap: float | None = None
    rope_theta: dict[str, float] = field(default_factory=dict, hash=False)
    query_pre_attn_scalar: float | None = None  # Gemma 3 only; Gemma 4 uses scale 1.0 with q/k norms
    per_layer_input_dim: int = 0  # Gemma 4 E models: a per-layer input embedding of this width per layer (0: none)
    kv_shared_layers: int = 0  # the last N layers reuse the K/V of an earlier layer of their type
    double_wide_shared_mlp: bool = False  # E2B: the KV-shared layers' MLP is twice as wide
    moe: MoE | None = None  # 26B-A4B: a mixture of experts beside every layer's dense MLP
    # Gemma 4 12B: the decoder of transformers' "unified" architecture (gemma4_unified: an encoder-free multimodal
    # model). Same text layers as Gemma 4; other class names and config types (the family's `HfArch`).
    unified: bool = False

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)

    @property
    def scan_period(self) -> int:
        """The layers of one group of a scan over them (layer_period): 6 for Gemma's 5 sliding : 1 global."""
        return layer_period(self.layer_types)

    @classmethod
    def from_dict(cls, d: dict) -> ModelSpec:
        """The inverse of dataclasses.asdict (a spec sent to another process as JSON)."""
        attention = {k: AttentionKind(**v) for k, v in d["attention"].items()}
        moe = MoE(**d["moe"]) if d.get("moe") else None
        return cls(**{**d, "layer_types": tuple(d["layer_types"]), "attention": attention, "moe": moe})

    def kind(self, layer: int) -> AttentionKind:
        return self.attention[self.layer_types[layer]]

    def layers_of(self, kind_name: str) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == kind_name]

    # --- KV sharing (transformers' rule, Gemma4TextAttention) ----------------------------------
    @property
    def first_kv_shared(self) -> int:
        return self.num_layers - self.kv_shared_layers

    def kv_shared(self, layer: int) -> bool:
        """Whether `layer` reuses another layer's keys and values (and so has no k/v projections or k norm)."""
        return self.kv_shared_layers > 0 and layer >= self.first_kv_shared

    def kv_source(self, layer: int) -> int:
        """The layer whose keys and values `layer` attends over: itself, or on a KV-shared layer the last layer of
        its type before the shared ones."""
        if not self.kv_shared(layer):
            return layer
        owners = [i for i in range(self.first_kv_shared) if self.layer_types[i] == self.layer_types[layer]]
        if not owners:
            raise ValueError(f"{self.name}: KV-shared layer {layer} ({self.layer_types[layer]}) has no earlier layer")
        return owners[-1]

    def mlp_dim(self, layer: int) -> int:
        """The dense MLP's width on `layer` (E2B doubles it on the KV-shared layers)."""
        wide = self.double_wide_shared_mlp and self.kv_shared(layer)
        return self.intermediate_size * (2 if wide else 1)

    def projection_shapes(self, layer: int) -> dict[str, tuple[int, int]]:
        """HF nn.Linear weight shapes [out, in] per neutral target present in this layer (on a MoE model the MLP
        targets are the dense branch's)."""
        a, d, f = self.kind(layer), self.hidden_size, self.mlp_dim(layer)
        shapes = {"q": (a.q_dim, d)}
        if not self.kv_shared(layer):
            shapes["k"] = (a.kv_dim, d)
            if not a.k_eq_v:
                shapes["v"] = (a.kv_dim, d)
        shapes.update(o=(d, a.q_dim), gate=(f, d), up=(f, d), down=(d, f))
        return shapes

    def targets_present(self, layer: int, targets: tuple[str, ...] | list[str]) -> list[str]:
        """The requested targets that exist in `layer` (v is absent on k_eq_v layers, k and v on KV-shared ones)."""
        shapes = self.projection_shapes(layer)
        return [t for t in targets if t in shapes]

    def absent_reason(self, layer: int, target: str) -> str:
        """Why `layer` has no `target` projection (for a target `targets_present` leaves out)."""
        if self.kv_shared(layer):
            return "KV-shared: keys and values of an earlier layer"
        return "k_eq_v: keys are reused as values"

    # --- parameter counts -------------------------------------------------------------------
    def layer_params(self, layer: int) -> int:
        a, d = self.kind(layer), self.hidden_size
        proj = sum(o * i for o, i in self.projection_shapes(layer).values())
        norms = 4 * d + a.head_dim * (1 if self.kv_shared(layer) else 2)  # 4 layer norms + per-head q (and k) norms
        if self.per_layer_input_dim:  # gate [P, D], projection [D, P] and the norm after it
            proj += 2 * d * self.per_layer_input_dim
            norms += d
        if self.moe is not None:  # router [E, D] + its scale [D] + per-expert scale [E], experts, 3 more norms
            proj += self.moe.num_experts * (d + self.moe.expert_params(d))
            norms += d + self.moe.num_experts + 3 * d
        return proj + norms

    @property
    def per_layer_embedding_params(self) -> int:
        """The per-layer input embedding table [vocab, layers · P] (0 without per-layer inputs)."""
        return self.vocab_size * self.num_layers * self.per_layer_input_dim

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size + self.per_layer_embedding_params

    @property
    def non_embedding_params(self) -> int:
        top = self.hidden_size  # the final norm
        if self.per_layer_input_dim:  # the model projection [layers · P, D] and its norm [P]
            top += self.per_layer_input_dim * (self.num_layers * self.hidden_size + 1)
        return sum(self.layer_params(i) for i in range(self.num_layers)) + top

    @property
    def total_params(self) -> int:
        head = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return self.embedding_params + self.non_embedding_params + head

    @property
    def active_params(self) -> int:
        """Parameters one token uses: all but the experts the router does not pick (= total without MoE)."""
        if self.moe is None:
            return self.total_params
        idle = (self.moe.num_experts - self.moe.top_k) * self.moe.expert_params(self.hidden_size)
        return self.total_params - self.num_layers * idle

    def lora_params(self, rank: int, targets: tuple[str, ...] | list[str]) -> int:
        """LoRA A [r, in] + B [out, r] for every present target of every layer."""
        total = 0
        for layer in range(self.num_layers):
            shapes = self.projection_shapes(layer)
            total += sum(rank * (shapes[t][0] + shapes[t][1]) for t in targets if t in shapes)
        return total

    # --- FLOPs (MFU) ------------------------------------------------------------------------
    def forward_flops_per_token(self, context: int) -> float:
        """Forward FLOPs for one token at sequence length `context`.

        2 FLOPs per multiply-add over every projection matmul and the LM head, plus attention
        scores and values (2·2·heads·head_dim per attended position; PaLM's convention of the full,
        un-halved causal context, clamped to the window on sliding layers). KV-shared layers project no keys or
        values; per-layer inputs add their model projection and each layer's gate and projection (the embedding
        lookup is no matmul); a MoE layer adds its router and the `top_k` experts a token runs through.
        """
        d, matmul = self.hidden_size, 0
        for layer in range(self.num_layers):
            matmul += sum(o * i for o, i in self.projection_shapes(layer).values())
            matmul += 2 * d * self.per_layer_input_dim
            if self.moe is not None:
                matmul += self.moe.num_experts * d + self.moe.top_k * self.moe.expert_params(d)
        matmul += self.num_layers * self.per_layer_input_dim * d  # per-layer inputs' model projection
        matmul += self.vocab_size * d  # LM head (tied or not, it is computed)
        return 2.0 * matmul + self.attention_flops_per_token(context)

    def attention_flops_per_token(self, context: int) -> float:
        """The attention scores and values part of `forward_flops_per_token`."""
        attention = 0
        for layer in range(self.num_layers):
            a = self.kind(layer)
            span = min(context, a.window) if a.window else context
            attention += 4 * a.num_heads * a.head_dim * span
        return float(attention)

    def lora_train_flops_per_token(
        self,
        context: int,
        recompute_activations: bool,
        *,
        recompute_attention: bool = True,
        recompute_matmuls: bool = True,
    ) -> float:
        """LoRA convention ("4N"): forward + backward to activations (no frozen-weight grads), plus the part of
        the forward recomputed when activations are: its attention unless the attention outputs are kept (torch's
        selective recompute), its weight matmuls unless their outputs are kept (jax's `dots`). LoRA's own matmuls
        are < 1% and left out; elementwise ops are not counted."""
        forward = self.forward_flops_per_token(context)
        if not recompute_activations:
            return 2.0 * forward
        attention = self.attention_flops_per_token(context)
        return 2.0 * forward + attention * recompute_attention + (forward - attention) * recompute_matmuls

    # --- tensor-parallel divisibility -------------------------------------------------------
    def tp_problems(self, tp: int, *, replicate_kv: bool = False) -> list[str]:
        """Why tensor parallelism `tp` cannot split this model's heads (empty = it can). The one head rule: query
        heads divide by tp; KV heads divide by tp, or are one head; with `replicate_kv` (vLLM, which holds each of
        kv < tp heads on tp/kv ranks) also kv < tp where tp is a multiple of kv. The training backends shard as-is."""
        problems = []
        for kind_name in dict.fromkeys(self.layer_types):
            a = self.attention[kind_name]
            n_layers, kv = len(self.layers_of(kind_name)), a.num_kv_heads
            if a.num_heads % tp:
                problems.append(
                    f"{a.num_heads} query heads on {kind_name} layers ({n_layers}) not divisible by tp={tp}"
                )
            if kv % tp == 0 or kv == 1 or (replicate_kv and kv < tp and tp % kv == 0):
                continue
            if replicate_kv and kv < tp:
                problems.append(f"tp={tp} is not a multiple of the {kv} KV heads on {kind_name} layers ({n_layers})")
            else:
                problems.append(f"{kv} KV heads on {kind_name} layers ({n_layers}) not divisible by tp={tp}")
        return problems

    def kv_replication(self, tp: int) -> dict[str, int]:
        """Layer types whose KV heads vLLM replicates at `tp` (kv < tp), with how many ranks hold each head."""
        return {
            name: tp // a.num_kv_heads
            for name, a in self.attention.items()
            if name in self.layer_types and a.num_kv_heads < tp
        }

    def shardable_tps(self, limit: int, *, replicate_kv: bool = False) -> list[int]:
        """The tp values up to `limit` that split every head group (tp_problems' rule; `replicate_kv`: vLLM's)."""
        return [tp for tp in range(1, limit + 1) if not self.tp_problems(tp, replicate_kv=replicate_kv)]
