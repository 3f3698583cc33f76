"""Backend-neutral description of a Gemma-family decoder: shapes, parameter counts and FLOPs.

Everything that needs a shape (planner, cost model, exporter, tiny models, MFU) asks a `ModelSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Backend-neutral LoRA targets, as written in recipes.
NEUTRAL_TARGETS: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
ATTENTION_TARGETS = ("q", "k", "v", "o")
MLP_TARGETS = ("gate", "up", "down")


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

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)

    @classmethod
    def from_dict(cls, d: dict) -> ModelSpec:
        """The inverse of dataclasses.asdict (a spec sent to another process as JSON)."""
        attention = {k: AttentionKind(**v) for k, v in d["attention"].items()}
        return cls(**{**d, "layer_types": tuple(d["layer_types"]), "attention": attention})

    def kind(self, layer: int) -> AttentionKind:
        return self.attention[self.layer_types[layer]]

    def layers_of(self, kind_name: str) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == kind_name]

    def projection_shapes(self, layer: int) -> dict[str, tuple[int, int]]:
        """HF nn.Linear weight shapes [out, in] per neutral target present in this layer."""
        a, d, f = self.kind(layer), self.hidden_size, self.intermediate_size
        shapes = {"q": (a.q_dim, d), "k": (a.kv_dim, d), "o": (d, a.q_dim)}
        if not a.k_eq_v:
            shapes["v"] = (a.kv_dim, d)
        shapes.update(gate=(f, d), up=(f, d), down=(d, f))
        return shapes

    def targets_present(self, layer: int, targets: tuple[str, ...] | list[str]) -> list[str]:
        """The requested targets that exist in `layer` (v is absent on k_eq_v layers)."""
        shapes = self.projection_shapes(layer)
        return [t for t in targets if t in shapes]

    # --- parameter counts -------------------------------------------------------------------
    def layer_params(self, layer: int) -> int:
        a = self.kind(layer)
        proj = sum(o * i for o, i in self.projection_shapes(layer).values())
        norms = 4 * self.hidden_size + 2 * a.head_dim  # 4 layer norms + per-head q/k norms
        return proj + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def non_embedding_params(self) -> int:
        return sum(self.layer_params(i) for i in range(self.num_layers)) + self.hidden_size

    @property
    def total_params(self) -> int:
        head = 0 if self.tied_embeddings else self.embedding_params
        return self.embedding_params + self.non_embedding_params + head

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
        un-halved causal context, clamped to the window on sliding layers).
        """
        matmul = sum(sum(o * i for o, i in self.projection_shapes(layer).values()) for layer in range(self.num_layers))
        matmul += self.vocab_size * self.hidden_size  # LM head (tied or not, it is computed)
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
    def tp_problems(self, tp: int) -> list[str]:
        """Why tensor parallelism `tp` cannot shard this model's heads as-is (empty = it can)."""
        problems = []
        for kind_name in dict.fromkeys(self.layer_types):
            a = self.attention[kind_name]
            n_layers = len(self.layers_of(kind_name))
            if a.num_heads % tp:
                problems.append(
                    f"{a.num_heads} query heads on {kind_name} layers ({n_layers}) not divisible by tp={tp}"
                )
            if a.num_kv_heads % tp and a.num_kv_heads != 1:
                problems.append(
                    f"{a.num_kv_heads} KV heads on {kind_name} layers ({n_layers}) not divisible by tp={tp}"
                )
        return problems

    def shardable_tps(self, limit: int) -> list[int]:
        """The tp values up to `limit` that shard every head group as-is (tp_problems: the training backends' rule;
        vLLM's, which replicates KV heads, is crosstune.serve.capacity.vllm_tps)."""
        return [tp for tp in range(1, limit + 1) if not self.tp_problems(tp)]
