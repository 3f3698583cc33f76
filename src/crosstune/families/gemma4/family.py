"""Gemma 4 (dense text decoder): sliding and global layers differ in head_dim, KV heads and k_eq_v."""

from __future__ import annotations

from typing import Any

from crosstune.families.base import HF_LAYER_TYPE_INV, ChatFormat, Family, gemma_layer_pattern
from crosstune.families.gemma4.tunix import TUNIX
from crosstune.families.spec import AttentionKind, ModelSpec

ROPE_THETA = {"sliding": 1e4, "global": 1e6}
GLOBAL_PARTIAL_ROTARY = 0.25  # "proportional" rope on global layers


def make_spec(
    name: str,
    layers: int,
    hidden: int,
    intermediate: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    global_kv_heads: int,
    global_head_dim: int,
    window: int,
    vocab: int,
    k_eq_v: bool = True,
    softcap: float | None = 30.0,
) -> ModelSpec:
    return ModelSpec(
        family="gemma4",
        name=name,
        hidden_size=hidden,
        intermediate_size=intermediate,
        vocab_size=vocab,
        layer_types=gemma_layer_pattern(layers),
        attention={
            "sliding": AttentionKind("sliding", heads, kv_heads, head_dim, window=window),
            "global": AttentionKind("global", heads, global_kv_heads, global_head_dim, k_eq_v=k_eq_v),
        },
        final_logit_softcap=softcap,
        rope_theta=dict(ROPE_THETA),
    )


SIZES = {
    "31b": make_spec("gemma-4-31b", 60, 5376, 21504, 32, 16, 256, 4, 512, 1024, 262144),
    # Tiny test model with every 31B peculiarity: 5:1 pattern, global head_dim 2x sliding, fewer KV heads on
    # global layers (2 -> 1), k_eq_v globals, softcap. KV heads never equal head_dim (a tunix loader hazard);
    # head sizes 32/64 are ones vLLM's CPU attention accepts (16 kills its engine at the first request).
    "tiny": make_spec("gemma-4-tiny", 6, 64, 128, 4, 2, 32, 1, 64, 32, 1024),
    # The demo's pretrained base: the tiny layout with hidden 128 and a 4x MLP (1.6M params), enough capacity to
    # learn the synthetic families; a CPU step costs about the same as tiny's (per-op overhead dominates). Its
    # 512-token window still slides over 1024-token rows, yet lets the sliding layers see a record's whole prompt
    # (a 128-token window left only the one global layer to copy widths and names from it: pass@1 stayed ~0).
    "small": make_spec("gemma-4-small", 6, 128, 512, 4, 2, 32, 1, 64, 512, 1024),
}


def attention_from_hf(cfg: dict[str, Any]) -> dict[str, AttentionKind]:
    heads, hd = cfg["num_attention_heads"], cfg["head_dim"]
    k_eq_v = bool(cfg.get("attention_k_eq_v", False))
    # HF uses num_global_key_value_heads only on k_eq_v global layers.
    global_kv = cfg.get("num_global_key_value_heads") if k_eq_v else None
    return {
        "sliding": AttentionKind("sliding", heads, cfg["num_key_value_heads"], hd, window=cfg.get("sliding_window")),
        "global": AttentionKind(
            "global", heads, global_kv or cfg["num_key_value_heads"], cfg.get("global_head_dim") or hd, k_eq_v=k_eq_v
        ),
    }


def build_hf_config(spec: ModelSpec) -> dict[str, Any]:
    s, g = spec.attention["sliding"], spec.attention["global"]
    if not g.k_eq_v and g.num_kv_heads != s.num_kv_heads:
        raise ValueError("HF Gemma 4 has distinct global KV heads only on k_eq_v layers")
    return {
        "model_type": "gemma4_text",
        "architectures": ["Gemma4ForCausalLM"],
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": s.num_heads,
        "num_key_value_heads": s.num_kv_heads,
        "head_dim": s.head_dim,
        "global_head_dim": g.head_dim,
        "num_global_key_value_heads": g.num_kv_heads if g.k_eq_v else None,
        "attention_k_eq_v": g.k_eq_v,
        "sliding_window": s.window,
        "layer_types": [HF_LAYER_TYPE_INV[t] for t in spec.layer_types],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": spec.rope_theta["sliding"]},
            "full_attention": {
                "rope_type": "proportional",
                "partial_rotary_factor": GLOBAL_PARTIAL_ROTARY,
                "rope_theta": spec.rope_theta["global"],
            },
        },
        "final_logit_softcapping": spec.final_logit_softcap,
        "tie_word_embeddings": spec.tied_embeddings,
        # The dense 31B layout: no per-layer embeddings, KV sharing or MoE.
        "hidden_size_per_layer_input": 0,
        "vocab_size_per_layer_input": spec.vocab_size,
        "num_kv_shared_layers": 0,
        "enable_moe_block": False,
    }


CHAT = ChatFormat(
    bos="<bos>",
    turn_start="<|turn>",
    turn_end="<turn|>",
    roles={"system": "system", "user": "user", "assistant": "model"},
    has_system_turn=True,
    thought_start="<|channel>",
    thought_end="<channel|>",
    extra_special=("<|think|>",),
)

GEMMA4 = Family(
    name="gemma4",
    hf_model_type="gemma4_text",
    hf_causal_lm_class="Gemma4ForCausalLM",
    decoder_layer_class="Gemma4TextDecoderLayer",
    chat=CHAT,
    sizes=SIZES,
    attention_from_hf=attention_from_hf,
    build_hf_config=build_hf_config,
    tunix=TUNIX,
)
