"""HF config.json -> Tunix ModelConfig: the fields every family shares here, each family's own in its folder
(`families/<name>/tunix.py`, `config_fields`). Traps met once are mapped there and listed in docs/TUNIX_LAYOUT.md.
"""

from __future__ import annotations

import importlib
from typing import Any

from crosstune.families import get_family
from crosstune.families.tunix_table import UnsupportedConfig
from crosstune.model_configs import decoder_config

HF_ROPE_KEYS = {"sliding": "sliding_attention", "global": "full_attention"}

__all__ = ["UnsupportedConfig", "tunix_model_class", "tunix_model_config", "tunix_module"]


def tunix_module(family: str):
    return importlib.import_module(get_family(family).tunix.module)


def tunix_model_class(family: str) -> type:
    return getattr(tunix_module(family), get_family(family).tunix.model_class)


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
    cfg = decoder_config(hf_config)  # multimodal checkpoints nest the decoder config
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
        global_base_frequency=int(_rope(cfg, "global").get("rope_theta", 1e6)),  # tunix's default is 1e4
        local_scale_factor=_rope_scale(_rope(cfg, "sliding"), "rope_parameters.sliding_attention"),
        global_scale_factor=_rope_scale(_rope(cfg, "global"), "rope_parameters.full_attention"),
        # Tunix's default (fsdp, tp) layout; weights that tp can't split are replicated per tensor at load time
        # (crosstune.train.jax.model.fit_shardings). Activation constraints may shard unevenly: XLA pads.
        shd_config=mod.ShardingConfig.get_default_sharding(),
        remat_config=mod.RematConfig.DECODER if remat else mod.RematConfig.NONE,
        param_dtype=_dtype(dtype),
    )
    own = get_family(family).tunix.config_fields(cfg, mod, _dtype(compute_dtype or dtype))
    return mod.ModelConfig(**common, **own)
