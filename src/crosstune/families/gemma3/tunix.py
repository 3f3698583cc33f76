"""Gemma 3 in tunix (`tunix.models.gemma3.model`): the HF <-> Tunix table and the config fields tunix needs.

Config traps (docs/TUNIX_LAYOUT.md): tunix's global rope base defaults to 1e4 (HF: 1e6, set by tunix_config);
HF's `query_pre_attn_scalar` must equal head_dim or hidden/heads, the only two scales tunix offers; the 5:1 layer
pattern is fixed in tunix; there is no logit soft-capping.
"""

from __future__ import annotations

from typing import Any

from crosstune.families.tunix_table import TunixParam, TunixTable, UnsupportedConfig, layer_types

P = TunixParam
ROWS = (
    P("embedder.input_embedding", ("embed_tokens.weight",), "VD", ("tp", "fsdp"), "copy", per_layer=False),
    P("final_norm.scale", ("norm.weight",), "D", ("tp",), "copy", per_layer=False),
    # tunix fuses q, k, v into one einsum when heads == KV heads
    P("attn.qkv_einsum.w", ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
      "3NDH", (None, "tp", "fsdp", None), "heads", ("q", "k", "v"), (2,), layout="qkv"),
    P("attn.q_einsum.w", ("self_attn.q_proj.weight",), "NDH", ("tp", "fsdp", None), "heads", ("q",), (1,),
      layout="q_kv"),
    P("attn.kv_einsum.w", ("self_attn.k_proj.weight", "self_attn.v_proj.weight"), "2KDH", (None, "tp", "fsdp", None),
      "heads", ("k", "v"), (2,), layout="q_kv", one_head_unsplit=True),
    P("attn.attn_vec_einsum.w", ("self_attn.o_proj.weight",), "NHD", ("tp", None, "fsdp"), "o_proj", ("o",), (0, 1)),
    P("attn._query_norm.scale", ("self_attn.q_norm.weight",), "H", ("tp",), "copy"),
    P("attn._key_norm.scale", ("self_attn.k_norm.weight",), "H", ("tp",), "copy"),
    P("mlp.gate_proj.kernel", ("mlp.gate_proj.weight",), "DF", ("fsdp", "tp"), "transpose", ("gate",), (0,)),
    P("mlp.up_proj.kernel", ("mlp.up_proj.weight",), "DF", ("fsdp", "tp"), "transpose", ("up",), (0,)),
    P("mlp.down_proj.kernel", ("mlp.down_proj.weight",), "FD", ("tp", "fsdp"), "transpose", ("down",), (0,)),
    P("pre_attention_norm.scale", ("input_layernorm.weight",), "D", ("tp",), "copy"),
    P("post_attention_norm.scale", ("post_attention_layernorm.weight",), "D", ("tp",), "copy"),
    P("pre_ffw_norm.scale", ("pre_feedforward_layernorm.weight",), "D", ("tp",), "copy"),
    P("post_ffw_norm.scale", ("post_feedforward_layernorm.weight",), "D", ("tp",), "copy"),
)  # fmt: skip


def config_fields(cfg: dict[str, Any], mod: Any, compute_dtype: Any) -> dict[str, Any]:
    """Gemma 3's own ModelConfig fields (tunix's Gemma 3 computes in the parameters' dtype)."""
    pattern = [mod.GEMMA3_ATTENTION_PATTERN[i % 6] for i in range(cfg["num_hidden_layers"])]
    wanted = [
        mod.AttentionType.GLOBAL if t == "full_attention" else mod.AttentionType.LOCAL_SLIDING for t in layer_types(cfg)
    ]
    if pattern != wanted:
        raise UnsupportedConfig("layer_types: tunix Gemma 3 fixes the 5 sliding : 1 global pattern")
    for field in ("final_logit_softcapping", "attn_logit_softcapping"):
        if cfg.get(field) is not None:
            raise UnsupportedConfig(f"{field}={cfg[field]}: tunix Gemma 3 has no logit soft-capping")
    return {"query_pre_attn_norm": _query_scale(cfg, mod)}


def _query_scale(cfg: dict[str, Any], mod: Any) -> Any:
    scalar = cfg.get("query_pre_attn_scalar", 256)
    norm = mod.QueryPreAttentionNormalisation
    if scalar == cfg["head_dim"]:
        return norm.BY_ONE_OVER_SQRT_HEAD_DIM
    if scalar * cfg["num_attention_heads"] == cfg["hidden_size"]:
        return norm.BY_ONE_OVER_SQRT_EMBED_DIM_DIV_NUM_HEADS
    raise UnsupportedConfig(
        f"query_pre_attn_scalar={scalar}: tunix Gemma 3 scales queries by 1/sqrt(head_dim={cfg['head_dim']}) or "
        f"1/sqrt(hidden/heads={cfg['hidden_size'] // cfg['num_attention_heads']}) only"
    )


TUNIX = TunixTable(ROWS, module="tunix.models.gemma3.model", model_class="Gemma3", config_fields=config_fields)
