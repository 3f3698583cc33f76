"""Gemma 3: one head layout on every layer, v_proj everywhere, 5:1 sliding/global, query_pre_attn_scalar."""

from __future__ import annotations

from typing import Any

from crosstune.families.base import HF_LAYER_TYPE_INV, ChatFormat, Family, gemma_layer_pattern
from crosstune.families.gemma3.tunix import TUNIX
from crosstune.families.spec import AttentionKind, ModelSpec

ROPE_THETA = {"sliding": 1e4, "global": 1e6}


def make_spec(
    name: str,
    layers: int,
    hidden: int,
    intermediate: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    window: int,
    vocab: int,
    query_pre_attn_scalar: float,
) -> ModelSpec:
    return ModelSpec(
        family="gemma3",
        name=name,
        hidden_size=hidden,
        intermediate_size=intermediate,
        vocab_size=vocab,
        layer_types=gemma_layer_pattern(layers),
        attention={
            "sliding": AttentionKind("sliding", heads, kv_heads, head_dim, window=window),
            "global": AttentionKind("global", heads, kv_heads, head_dim),
        },
        rope_theta=dict(ROPE_THETA),
        query_pre_attn_scalar=query_pre_attn_scalar,
    )


SIZES = {
    "1b": make_spec("gemma-3-1b", 26, 1152, 6912, 4, 1, 256, 512, 262144, 256),
    "4b": make_spec("gemma-3-4b", 34, 2560, 10240, 8, 4, 256, 1024, 262208, 256),
    "12b": make_spec("gemma-3-12b", 48, 3840, 15360, 16, 8, 256, 1024, 262208, 256),
    "27b": make_spec("gemma-3-27b", 62, 5376, 21504, 32, 16, 128, 1024, 262208, 168),
    # Tiny test model: query_pre_attn_scalar == head_dim because tunix only offers 1/sqrt(head_dim)
    # or 1/sqrt(hidden/heads); KV heads != heads so tunix keeps separate q and kv einsums; head_dim 32 is one
    # vLLM's CPU attention accepts.
    "tiny": make_spec("gemma-3-tiny", 6, 64, 128, 4, 2, 32, 32, 1024, 32),
}


def attention_from_hf(cfg: dict[str, Any]) -> dict[str, AttentionKind]:
    heads, kv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    return {
        "sliding": AttentionKind("sliding", heads, kv, hd, window=cfg.get("sliding_window")),
        "global": AttentionKind("global", heads, kv, hd),
    }


def build_hf_config(spec: ModelSpec) -> dict[str, Any]:
    s, g = spec.attention["sliding"], spec.attention["global"]
    assert (s.num_heads, s.num_kv_heads, s.head_dim) == (g.num_heads, g.num_kv_heads, g.head_dim), (
        "Gemma 3 has one head layout on all layers"
    )
    return {
        "model_type": "gemma3_text",
        "architectures": ["Gemma3ForCausalLM"],
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": s.num_heads,
        "num_key_value_heads": s.num_kv_heads,
        "head_dim": s.head_dim,
        "query_pre_attn_scalar": spec.query_pre_attn_scalar,
        "sliding_window": s.window,
        "layer_types": [HF_LAYER_TYPE_INV[t] for t in spec.layer_types],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": spec.rope_theta["sliding"]},
            "full_attention": {"rope_type": "default", "rope_theta": spec.rope_theta["global"]},
        },
        "final_logit_softcapping": spec.final_logit_softcap,
        "tie_word_embeddings": spec.tied_embeddings,
    }


CHAT = ChatFormat(
    bos="<bos>",
    turn_start="<start_of_turn>",
    turn_end="<end_of_turn>",
    roles={"user": "user", "assistant": "model"},
    has_system_turn=False,  # system text is folded into the first user turn
)

GEMMA3 = Family(
    name="gemma3",
    hf_model_type="gemma3_text",
    hf_causal_lm_class="Gemma3ForCausalLM",
    decoder_layer_class="Gemma3DecoderLayer",
    chat=CHAT,
    sizes=SIZES,
    attention_from_hf=attention_from_hf,
    build_hf_config=build_hf_config,
    tunix=TUNIX,
    multimodal_config="Gemma3Config",
    multimodal_model="Gemma3ForConditionalGeneration",
    norm_identity=0.0,
)
