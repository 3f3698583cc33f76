"""Gemma 4 in tunix (`tunix.models.gemma4.model`): the HF <-> Tunix table and the config fields.

Config traps (docs/TUNIX_LAYOUT.md): `num_global_key_value_heads` applies only to k_eq_v layers in HF (tunix
applies it to every global layer); `global_head_dim` -> `global_key_size` (tunix default 512); softcap None must be
passed explicitly (tunix default 30); the layer pattern comes from `layer_types`. Tunix never fuses q/k/v here.
KV-shared layers (E2B, E4B): tunix still builds their k/v weights and k norm, which HF lacks and nothing reads
(zeros here), and takes a shared layer's K/V from fixed layers (`kv_sharing_ok`). The MoE (26B-A4B): router, fused
gate/up and down experts as tunix stores them; its 0.1.7 router reads the normed expert input, not the residual as
transformers' does (crosstune.train.jax.moe routes as transformers).
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
      "heads", ("k", "v"), (2,), layout="q_kv", one_head_unsplit=True, kv_owner_only=True),
    # k_eq_v global layers: values reuse keys (no v_proj); tunix shards k like q, even with one KV head
    P("attn.q_einsum.w", ("self_attn.q_proj.weight",), "NDH", ("tp", "fsdp", None), "heads", ("q",), (1,),
      layout="q_k"),
    P("attn.k_einsum.w", ("self_attn.k_proj.weight",), "KDH", ("tp", "fsdp", None), "heads", ("k",), (1,),
      layout="q_k", kv_owner_only=True),
    P("attn.attn_vec_einsum.w", ("self_attn.o_proj.weight",), "NHD", ("tp", None, "fsdp"), "o_proj", ("o",), (0, 1)),
    P("attn._query_norm.scale", ("self_attn.q_norm.weight",), "H", ("tp",), "copy"),
    P("attn._key_norm.scale", ("self_attn.k_norm.weight",), "H", ("tp",), "copy", kv_owner_only=True),
    P("mlp.gate_proj.kernel", ("mlp.gate_proj.weight",), "DF", ("fsdp", "tp"), "transpose", ("gate",), (0,)),
    P("mlp.up_proj.kernel", ("mlp.up_proj.weight",), "DF", ("fsdp", "tp"), "transpose", ("up",), (0,)),
    P("mlp.down_proj.kernel", ("mlp.down_proj.weight",), "FD", ("tp", "fsdp"), "transpose", ("down",), (0,)),
    P("pre_attention_norm.scale", ("input_layernorm.weight",), "D", ("tp",), "copy"),
    P("post_attention_norm.scale", ("post_attention_layernorm.weight",), "D", ("tp",), "copy"),
    P("pre_ffw_norm.scale", ("pre_feedforward_layernorm.weight",), "D", ("tp",), "copy"),
    P("post_ffw_norm.scale", ("post_feedforward_layernorm.weight",), "D", ("tp",), "copy"),
    P("skip_scale", ("layer_scalar",), "1", (None,), "reshape", hf_shape=("1",)),
    # Per-layer inputs (E2B, E4B): one [vocab, layers, P] table and a model projection, a gate and projection per layer
    P("embedder.per_layer_input_embedding", ("embed_tokens_per_layer.weight",), "VLP", ("tp", None, "fsdp"),
      "reshape", per_layer=False, when="per_layer_input", hf_shape=("V", "LP")),
    P("embedder.per_layer_model_projection.w", ("per_layer_model_projection.weight",), "DLP", ("fsdp", None, "tp"),
      "transpose", per_layer=False, when="per_layer_input"),
    P("embedder.per_layer_projection_norm.scale", ("per_layer_projection_norm.weight",), "P", ("tp",), "copy",
      per_layer=False, when="per_layer_input"),
    P("per_layer_input_gate.w", ("per_layer_input_gate.weight",), "DP", ("fsdp", "tp"), "transpose",
      when="per_layer_input"),
    P("per_layer_projection.w", ("per_layer_projection.weight",), "PD", ("tp", "fsdp"), "transpose",
      when="per_layer_input"),
    P("post_per_layer_input_norm.scale", ("post_per_layer_input_norm.weight",), "D", ("tp",), "copy",
      when="per_layer_input"),
    # The MoE block (26B-A4B) beside the dense MLP: HF gate_up_proj [E, 2·X, D] is tunix's [E, 2, X, D]
    P("moe.router_logits", ("router.proj.weight",), "DE", (None, None), "transpose", when="moe"),
    P("moe.router_scale", ("router.scale",), "D", (None,), "copy", when="moe"),
    P("moe.per_expert_scale", ("router.per_expert_scale",), "E", (None,), "copy", when="moe"),
    P("moe.gating_einsum", ("experts.gate_up_proj",), "E2XD", ("fsdp", None, None, "tp"), "reshape", when="moe",
      hf_shape=("E", "2X", "D")),
    P("moe.linear", ("experts.down_proj",), "EXD", ("fsdp", "tp", None), "transpose", when="moe",
      hf_shape=("E", "D", "X")),
    P("moe_pre_ffw_norm.scale", ("pre_feedforward_layernorm_2.weight",), "D", ("tp",), "copy", when="moe"),
    P("moe_post_ffw_norm.scale", ("post_feedforward_layernorm_2.weight",), "D", ("tp",), "copy", when="moe"),
    P("dense_post_ffw_norm.scale", ("post_feedforward_layernorm_1.weight",), "D", ("tp",), "copy", when="moe"),
)  # fmt: skip


def kv_sharing_ok(layer_types: tuple[str, ...], shared: int) -> bool:
    """Whether tunix 0.1.7 shares K/V as transformers does: transformers gives a KV-shared layer the K/V of the
    last unshared layer of its type, tunix (`create_kv_cache_sharing_patterns`) that of the last unshared layer
    (global) or the one before it (sliding), so those must be the layers transformers picks."""
    unshared = len(layer_types) - shared
    if shared == 0:
        return True
    if unshared < 1:
        return False
    for kind in set(layer_types[unshared:]):
        owners = [i for i in range(unshared) if layer_types[i] == kind]
        if not owners or owners[-1] != unshared - (1 if kind == "global" else 2):
            return False
    return True


def config_fields(cfg: dict[str, Any], mod: Any, compute_dtype: Any) -> dict[str, Any]:
    """Gemma 4's own ModelConfig fields; `compute_dtype` is the activations' dtype."""
    k_eq_v = bool(cfg.get("attention_k_eq_v", False))
    layers = cfg["num_hidden_layers"]
    attn = mod.AttentionType
    rope = cfg.get("rope_parameters") or {}
    shared = cfg.get("num_kv_shared_layers") or 0
    types = tuple("global" if t == "full_attention" else "sliding" for t in layer_types(cfg))
    if not kv_sharing_ok(types, shared):
        raise UnsupportedConfig(
            f"num_kv_shared_layers {shared} with layer_types {list(layer_types(cfg))}: tunix takes a shared "
            "layer's keys and values from the last unshared layer (global) or the one before (sliding); "
            "transformers from the last unshared layer of its type — they differ here"
        )
    per_layer = cfg.get("hidden_size_per_layer_input") or 0
    if per_layer and cfg.get("vocab_size_per_layer_input", cfg["vocab_size"]) != cfg["vocab_size"]:
        raise UnsupportedConfig("vocab_size_per_layer_input != vocab_size: tunix's per-layer table has num_embed rows")
    moe = dict(enable_moe=False)
    if cfg.get("enable_moe_block"):
        moe = dict(
            enable_moe=True,
            num_experts=cfg["num_experts"],
            num_experts_per_tok=cfg["top_k_experts"],
            expert_dim=cfg["moe_intermediate_size"],
            moe_dense_hidden_dim=cfg["intermediate_size"],
        )
    return dict(
        **moe,
        final_logit_softcap=cfg.get("final_logit_softcapping"),  # None stays None (tunix's default is 30)
        per_layer_input_dim=per_layer,
        # HF uses num_global_key_value_heads only when k_eq_v; tunix uses it on every global layer.
        num_global_kv_heads=cfg.get("num_global_key_value_heads") if k_eq_v else None,
        global_key_size=cfg.get("global_head_dim") or cfg["head_dim"],
        attention_pattern=tuple(attn.GLOBAL if t == "full_attention" else attn.LOCAL_SLIDING for t in layer_types(cfg)),
        frac_shared_layers=shared / layers,
        global_rope_proportion=float((rope.get("full_attention") or {}).get("partial_rotary_factor", 1.0)),
        local_rope_proportion=float((rope.get("sliding_attention") or {}).get("partial_rotary_factor", 1.0)),
        k_eq_v_global=k_eq_v,
        override_kv_shared_ffw_hidden=2 * cfg["intermediate_size"] if cfg.get("use_double_wide_mlp") else None,
        dtype=compute_dtype,
    )


TUNIX = TunixTable(
    ROWS,
    module="tunix.models.gemma4.model",
    model_class="Gemma4",
    config_fields=config_fields,
    kv_sharing_ok=kv_sharing_ok,
)
