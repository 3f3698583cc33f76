"""HF config.json -> Tunix ModelConfig for Gemma 3 and Gemma 4 (shared/notes/stacks.md, "HF <-> Tunix parity").

Each trap below was met once and is mapped here, nowhere else:
- Gemma 3: tunix's global rope base defaults to 1e4 (HF: 1e6); HF's `query_pre_attn_scalar` must equal head_dim
  or hidden/heads (the only two scales tunix offers); the 5:1 layer pattern is fixed in tunix.
- Gemma 4: `num_global_key_value_heads` applies only to k_eq_v layers in HF (tunix applies it to every global
  layer); `global_head_dim` -> `global_key_size` (tunix default 512); softcap None must be passed explicitly
  (tunix default 30); the layer pattern comes from `layer_types`.
"""

from __future__ import annotations

import importlib
from typing import Any

from crosstune.errors import CrosstuneError

TUNIX_MODULES = {"gemma3": "tunix.models.gemma3.model", "gemma4": "tunix.models.gemma4.model"}
TUNIX_CLASSES = {"gemma3": "Gemma3", "gemma4": "Gemma4"}
HF_ROPE_KEYS = {"sliding": "sliding_attention", "global": "full_attention"}


class UnsupportedConfig(CrosstuneError, ValueError):
    """A config.json field that tunix's model can't reproduce exactly."""


def tunix_module(family: str):
    return importlib.import_module(TUNIX_MODULES[family])


def tunix_model_class(family: str) -> type:
    return getattr(tunix_module(family), TUNIX_CLASSES[family])


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    return cfg.get("text_config", cfg)  # multimodal checkpoints nest the decoder config


def _rope(cfg: dict[str, Any], kind: str) -> dict[str, Any]:
    params = cfg.get("rope_parameters") or {}
    return params.get(HF_ROPE_KEYS[kind]) or {}


def _rope_scale(rope: dict[str, Any], where: str) -> float:
    kind = rope.get("rope_type", "default")
    if kind in ("default", "linear", "proportional"):
        return float(rope.get("factor", 1.0))  # linear position scaling; 1.0 when absent
    raise UnsupportedConfig(f"{where}: rope_type {kind!r} has no tunix equivalent (default, linear, proportional)")


def _dtype(name: str):
    import jax.numpy as jnp

    return {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[name]


def tunix_model_config(
    family: str,
    hf_config: dict[str, Any],
    *,
    dtype: str = "float32",
    compute_dtype: str | None = None,
    remat: bool = False,
):
    """The tunix ModelConfig that computes what transformers computes for `hf_config` (a config.json dict).
    `dtype` is the parameters'; `compute_dtype` the activations' (Gemma 4; tunix's Gemma 3 computes in `dtype`)."""
    cfg = _text_config(hf_config)
    mod = tunix_module(family)
    common = dict(
        num_layers=cfg["num_hidden_layers"],
        num_embed=cfg["vocab_size"],
        embed_dim=cfg["hidden_size"],
        hidden_dim=cfg["intermediate_size"],
        num_heads=cfg["num_attention_heads"],
        head_dim=cfg["head_dim"],
        num_kv_heads=cfg["num_key_value_heads"],
        sliding_window_size=cfg.get("sliding_window"),
        local_base_frequency=int(_rope(cfg, "sliding").get("rope_theta", 1e4)),
        global_base_frequency=int(_rope(cfg, "global").get("rope_theta", 1e6)),
        local_scale_factor=_rope_scale(_rope(cfg, "sliding"), "rope_parameters.sliding_attention"),
        global_scale_factor=_rope_scale(_rope(cfg, "global"), "rope_parameters.full_attention"),
        # Tunix's default (fsdp, tp) layout; weights that tp can't split are replicated per tensor at load time
        # (crosstune.train.jax_model.fit_shardings). Activation constraints may shard unevenly: XLA pads.
        shd_config=mod.ShardingConfig.get_default_sharding(),
        remat_config=mod.RematConfig.DECODER if remat else mod.RematConfig.NONE,
        param_dtype=_dtype(dtype),
    )
    if family == "gemma3":
        _check_gemma3(cfg, mod)
        return mod.ModelConfig(**common, query_pre_attn_norm=_gemma3_query_scale(cfg, mod))
    return mod.ModelConfig(**common, **_gemma4_fields(cfg, mod), dtype=_dtype(compute_dtype or dtype))


def _gemma3_query_scale(cfg: dict[str, Any], mod):
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


def _check_gemma3(cfg: dict[str, Any], mod) -> None:
    pattern = [mod.GEMMA3_ATTENTION_PATTERN[i % 6] for i in range(cfg["num_hidden_layers"])]
    wanted = [
        mod.AttentionType.GLOBAL if t == "full_attention" else mod.AttentionType.LOCAL_SLIDING for t in _types(cfg)
    ]
    if pattern != wanted:
        raise UnsupportedConfig("layer_types: tunix Gemma 3 fixes the 5 sliding : 1 global pattern")
    for field in ("final_logit_softcapping", "attn_logit_softcapping"):
        if cfg.get(field) is not None:
            raise UnsupportedConfig(f"{field}={cfg[field]}: tunix Gemma 3 has no logit soft-capping")


def _types(cfg: dict[str, Any]) -> list[str]:
    n = cfg["num_hidden_layers"]
    return cfg.get("layer_types") or ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]


def _gemma4_fields(cfg: dict[str, Any], mod) -> dict[str, Any]:
    if cfg.get("enable_moe_block"):
        raise UnsupportedConfig("enable_moe_block: crosstune's Gemma 4 family covers the dense models")
    k_eq_v = bool(cfg.get("attention_k_eq_v", False))
    layers = cfg["num_hidden_layers"]
    attn = mod.AttentionType
    return dict(
        final_logit_softcap=cfg.get("final_logit_softcapping"),  # None stays None (tunix's default is 30)
        per_layer_input_dim=cfg.get("hidden_size_per_layer_input") or 0,
        # HF uses num_global_key_value_heads only when k_eq_v; tunix uses it on every global layer.
        num_global_kv_heads=cfg.get("num_global_key_value_heads") if k_eq_v else None,
        global_key_size=cfg.get("global_head_dim") or cfg["head_dim"],
        attention_pattern=tuple(attn.GLOBAL if t == "full_attention" else attn.LOCAL_SLIDING for t in _types(cfg)),
        frac_shared_layers=(cfg.get("num_kv_shared_layers") or 0) / layers,
        global_rope_proportion=float(_rope(cfg, "global").get("partial_rotary_factor", 1.0)),
        local_rope_proportion=float(_rope(cfg, "sliding").get("partial_rotary_factor", 1.0)),
        k_eq_v_global=k_eq_v,
        override_kv_shared_ffw_hidden=2 * cfg["intermediate_size"] if cfg.get("use_double_wide_mlp") else None,
    )
