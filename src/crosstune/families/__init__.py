"""Model families: the single place that knows Gemma layouts, names, chat formats and FLOPs."""

from __future__ import annotations

from crosstune.families.base import Family
from crosstune.families.gemma3 import GEMMA3
from crosstune.families.gemma4 import GEMMA4
from crosstune.families.spec import NEUTRAL_TARGETS, AttentionKind, ModelSpec

FAMILIES: dict[str, Family] = {f.name: f for f in (GEMMA3, GEMMA4)}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"unknown model family {name!r}; known: {', '.join(FAMILIES)}") from None


def family_of_hf_config(cfg: dict) -> Family:
    """The family whose HF model_type matches a config.json (multimodal configs nest text_config)."""
    model_type = cfg.get("text_config", cfg).get("model_type")
    for fam in FAMILIES.values():
        if fam.hf_model_type == model_type:
            return fam
    raise KeyError(f"config.json model_type {model_type!r} is not a supported family ({', '.join(FAMILIES)})")


__all__ = ["FAMILIES", "NEUTRAL_TARGETS", "AttentionKind", "Family", "ModelSpec", "family_of_hf_config", "get_family"]
