"""Gemma 4 (dense) in tunix (`tunix.models.gemma4.model`): the HF <-> Tunix table and the config fields.

Config traps (docs/TUNIX_LAYOUT.md): `num_global_key_value_heads` applies only to k_eq_v layers in HF (tunix
applies it to every global layer); `global_head_dim` -> `global_key_size` (tunix default 512); softcap None must be
passed explicitly (tunix default 30); the layer pattern comes from `layer_types`. Tunix never fuses q/k/v here.
"""

from __future__ import annotations

from typing import Any

from crosstune.families.tunix_table import TunixParam, TunixTable, UnsupportedConfig, layer_types

P = TunixParam
ROWS = (
    P("embedder.input_embedding", ("embed_tokens.weight",), "VD", ("tp", "fsdp"), "copy", per_layer=False),
    P("final_norm.scale", ("norm.weight",), "D", ("tp",), "copy", per_layer=False),
    P("attn.q_einsum.w", ("self_attn.q_proj.weight",), "NDH", ("tp", "fsdp", None), "heads", ("q",), (1,),
      layout="q_kv"),
    P("attn.kv_einsum.w", ("self_attn.k_proj.weight", "self_attn.v_proj.weight"), "2KDH", (None, "tp", "fsdp", None),
      "heads", ("k", "v"), (2,), layout="q_kv", one_head_unsplit=True),
    # k_eq_v global layers: values reuse keys (no v_proj); tunix shards k like q, even with one KV head
    P("attn.q_einsum.w", ("self_attn.q_proj.weight",), "NDH", ("tp", "fsdp", None), "heads", ("q",), (1,),
      layout="q_k"),
    P("attn.k_einsum.w", ("self_attn.k_proj.weight",), "KDH", ("tp", "fsdp", None), "heads", ("k",), (1,),
      layout="q_k"),
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
    P("skip_scale", ("layer_scalar",), "1", (None,), "reshape"),
)  # fmt: skip


def config_fields(cfg: dict[str, Any], mod: Any, compute_dtype: Any) -> dict[str, Any]:
    """Gemma 4's own ModelConfig fields; `compute_dtype` is the activations' dtype."""
    if cfg.get("enable_moe_block"):
        raise UnsupportedConfig("enable_moe_block: crosstune's Gemma 4 family covers the dense models")
    k_eq_v = bool(cfg.get("attention_k_eq_v", False))
    layers = cfg["num_hidden_layers"]
    attn = mod.AttentionType
    rope = cfg.get("rope_parameters") or {}
    return dict(
        final_logit_softcap=cfg.get("final_logit_softcapping"),  # None stays None (tunix's default is 30)
        per_layer_input_dim=cfg.get("hidden_size_per_layer_input") or 0,
        # HF uses num_global_key_value_heads only when k_eq_v; tunix uses it on every global layer.
        num_global_kv_heads=cfg.get("num_global_key_value_heads") if k_eq_v else None,
        global_key_size=cfg.get("global_head_dim") or cfg["head_dim"],
        attention_pattern=tuple(attn.GLOBAL if t == "full_attention" else attn.LOCAL_SLIDING for t in layer_types(cfg)),
        frac_shared_layers=(cfg.get("num_kv_shared_layers") or 0) / layers,
        global_rope_proportion=float((rope.get("full_attention") or {}).get("partial_rotary_factor", 1.0)),
        local_rope_proportion=float((rope.get("sliding_attention") or {}).get("partial_rotary_factor", 1.0)),
        k_eq_v_global=k_eq_v,
        override_kv_shared_ffw_hidden=2 * cfg["intermediate_size"] if cfg.get("use_double_wide_mlp") else None,
        dtype=compute_dtype,
    )


TUNIX = TunixTable(ROWS, module="tunix.models.gemma4.model", model_class="Gemma4", config_fields=config_fields)
