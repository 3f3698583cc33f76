"""Gemma 4 text decoders: sliding and global layers differ in head_dim, KV heads and k_eq_v (31B, 26B-A4B, 12B); the
E models (E2B, E4B) add per-layer input embeddings and KV-shared layers; 26B-A4B a mixture of experts beside the
dense MLP; the 12B is transformers' "unified" architecture (gemma4_unified: an encoder-free multimodal model whose
decoder is the dense Gemma 4 one under other class names, `UNIFIED`). Dimensions from the published configs
(MaxText's gemma4-*.yml, the hub's config.json), checked against Tunix 0.1.7's `ModelConfig.gemma4_*` classmethods
and transformers' Gemma4TextConfig / Gemma4UnifiedTextConfig by tests/families."""

from __future__ import annotations

from typing import Any

from crosstune.families.base import HF_LAYER_TYPE_INV, ChatFormat, Family, HfArch, gemma_layer_pattern
from crosstune.families.gemma4.tunix import TUNIX
from crosstune.families.spec import AttentionKind, ModelSpec, MoE

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
    *,
    every: int = 6,
    per_layer_input: int = 0,
    kv_shared: int = 0,
    double_wide: bool = False,
    moe: MoE | None = None,
    unified: bool = False,
) -> ModelSpec:
    """A Gemma 4 spec: `every`-th layer global (6: 5 sliding : 1 global; E2B's 5: 4 : 1), the last `kv_shared`
    layers reusing earlier layers' K/V, `per_layer_input` the per-layer embedding width, `moe` the experts."""
    return ModelSpec(
        family="gemma4",
        name=name,
        hidden_size=hidden,
        intermediate_size=intermediate,
        vocab_size=vocab,
        layer_types=gemma_layer_pattern(layers, every),
        attention={
            "sliding": AttentionKind("sliding", heads, kv_heads, head_dim, window=window),
            "global": AttentionKind("global", heads, global_kv_heads, global_head_dim, k_eq_v=k_eq_v),
        },
        final_logit_softcap=softcap,
        rope_theta=dict(ROPE_THETA),
        per_layer_input_dim=per_layer_input,
        kv_shared_layers=kv_shared,
        double_wide_shared_mlp=double_wide,
        moe=moe,
        unified=unified,
    )


# transformers' gemma4_unified (the 12B): its text decoder has Gemma 4's dense layers (no per-layer inputs, no MoE)
UNIFIED = HfArch(
    model_type="gemma4_unified_text",
    causal_lm_class="Gemma4UnifiedForCausalLM",
    decoder_layer_class="Gemma4UnifiedTextDecoderLayer",
    multimodal_config="Gemma4UnifiedConfig",
    multimodal_model="Gemma4UnifiedForConditionalGeneration",
)

SIZES = {
    # E2B: 4 sliding : 1 global, one KV head everywhere, the last 20 layers KV-shared with a 2x wide MLP
    "e2b": make_spec("gemma-4-e2b", 35, 1536, 6144, 8, 1, 256, 1, 512, 512, 262144, k_eq_v=False, every=5,
                     per_layer_input=256, kv_shared=20, double_wide=True),
    "e4b": make_spec("gemma-4-e4b", 42, 2560, 10240, 8, 2, 256, 2, 512, 512, 262144, k_eq_v=False,
                     per_layer_input=256, kv_shared=18),
    # 26B-A4B: a dense MLP of 2,112 beside 128 experts of 704, 8 per token (~4 B active parameters)
    "26b-a4b": make_spec("gemma-4-26b-a4b", 30, 2816, 2112, 16, 8, 256, 2, 512, 1024, 262144,
                         moe=MoE(num_experts=128, top_k=8, expert_dim=704)),
    # 12B ("unified"): 16 heads, 8 KV heads on sliding layers, 1 on the k_eq_v global ones (tunix 0.1.7 has no 12B:
    # its config is the 31B classmethod's structure at these dimensions, tests/families/test_gemma4_unified.py)
    "12b": make_spec("gemma-4-12b", 48, 3840, 15360, 16, 8, 256, 1, 512, 1024, 262144, unified=True),
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
    # The E models' architecture at tiny size: per-layer inputs, one KV head, no k_eq_v, the last 3 of 6 layers
    # KV-shared (a sliding and a global one among them, as tunix requires: 2 global layers, every 3rd) with E2B's
    # double-wide MLP there.
    "tiny-e": make_spec("gemma-4-tiny-e", 6, 64, 128, 4, 1, 32, 1, 64, 32, 1024, k_eq_v=False, every=3,
                        per_layer_input=16, kv_shared=3, double_wide=True),
    # The same with the E4B's sharing layers, built as the owning ones (no double-wide MLP): one scan body
    # (crosstune.train.jax.kv_carry) where tiny-e, as the E2B, stacks in two segments.
    "tiny-e4b": make_spec("gemma-4-tiny-e4b", 6, 64, 128, 4, 1, 32, 1, 64, 32, 1024, k_eq_v=False, every=3,
                          per_layer_input=16, kv_shared=3),
    # The 26B-A4B's architecture at tiny size: 8 experts of width 32, 2 per token, beside a dense MLP of 128.
    "tiny-moe": make_spec("gemma-4-tiny-moe", 6, 64, 128, 4, 2, 32, 1, 64, 32, 1024,
                          moe=MoE(num_experts=8, top_k=2, expert_dim=32)),
    # The 12B's architecture (gemma4_unified) at tiny size: tiny's layout, as the 12B has the 31B's
    "tiny-unified": make_spec("gemma-4-tiny-unified", 6, 64, 128, 4, 2, 32, 1, 64, 32, 1024, unified=True),
}  # fmt: skip


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


def layout_from_hf(cfg: dict[str, Any]) -> dict[str, Any]:
    """The ModelSpec fields of the E models' and the MoE's layouts in a text config (defaults: the dense layout)."""
    moe = None
    if cfg.get("enable_moe_block"):
        moe = MoE(cfg["num_experts"], cfg["top_k_experts"], cfg["moe_intermediate_size"])
    per_layer = cfg.get("hidden_size_per_layer_input") or 0
    if per_layer and cfg.get("vocab_size_per_layer_input", cfg["vocab_size"]) != cfg["vocab_size"]:
        raise ValueError(
            f"vocab_size_per_layer_input {cfg['vocab_size_per_layer_input']} != vocab_size {cfg['vocab_size']}: "
            "crosstune's Gemma 4 layout (as tunix's) has one vocabulary for both embeddings"
        )
    return dict(
        per_layer_input_dim=per_layer,
        kv_shared_layers=cfg.get("num_kv_shared_layers") or 0,
        double_wide_shared_mlp=bool(cfg.get("use_double_wide_mlp")),
        moe=moe,
    )


def build_hf_config(spec: ModelSpec) -> dict[str, Any]:
    s, g = spec.attention["sliding"], spec.attention["global"]
    if not g.k_eq_v and g.num_kv_heads != s.num_kv_heads:
        raise ValueError("HF Gemma 4 has distinct global KV heads only on k_eq_v layers")
    if spec.unified:
        if spec.per_layer_input_dim or spec.moe is not None or spec.double_wide_shared_mlp:
            raise ValueError(f"{spec.name}: transformers' gemma4_unified has no per-layer inputs, MoE or wide MLP")
        dense = build_dense_hf_config(spec)
        absent = ("hidden_size_per_layer_input", "vocab_size_per_layer_input", "enable_moe_block")  # no such fields
        return {
            **{k: v for k, v in dense.items() if k not in absent},
            "model_type": UNIFIED.model_type,
            "architectures": [UNIFIED.causal_lm_class],
        }
    return build_dense_hf_config(spec)


def build_dense_hf_config(spec: ModelSpec) -> dict[str, Any]:
    """The config of Gemma4TextConfig (`build_hf_config` checks the spec)."""
    s, g = spec.attention["sliding"], spec.attention["global"]
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
        # Set explicitly: transformers' defaults turn per-layer inputs on (256 wide, a 262,144-entry table).
        "hidden_size_per_layer_input": spec.per_layer_input_dim,
        "vocab_size_per_layer_input": spec.vocab_size,
        "num_kv_shared_layers": spec.kv_shared_layers,
        "enable_moe_block": spec.moe is not None,
        # Written only where they differ from transformers' defaults (False, None): a dense model's config stays
        # what it was before the E and MoE sizes, and so does every hash of it (the shipped demo base's name).
        **({"use_double_wide_mlp": True} if spec.double_wide_shared_mlp else {}),
        **(
            {
                "num_experts": spec.moe.num_experts,
                "top_k_experts": spec.moe.top_k,
                "moe_intermediate_size": spec.moe.expert_dim,
            }
            if spec.moe
            else {}
        ),
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
    layout_from_hf=layout_from_hf,
    multimodal_config="Gemma4Config",
    multimodal_model="Gemma4ForConditionalGeneration",
    unified_arch=UNIFIED,
    norm_identity=1.0,
)
