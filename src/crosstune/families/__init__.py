"""Model families: the single place that knows Gemma layouts, names, chat formats and FLOPs.

Each family is one folder (`families/<name>/`: `family.py` sizes and HF config, `tunix.py` the HF <-> Tunix table,
`chat_template.jinja`) whose package exports `FAMILY`; adding a family is adding a folder.
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib.resources import files

from crosstune.families.base import Family
from crosstune.families.spec import NEUTRAL_TARGETS, AttentionKind, ModelSpec


def _discover() -> dict[str, Family]:
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.ispkg:
            family = importlib.import_module(f"{__name__}.{info.name}").FAMILY
            if family.name != info.name:
                raise ValueError(f"families/{info.name}/ declares family {family.name!r}: name the folder after it")
            found[family.name] = family
    return found


FAMILIES: dict[str, Family] = _discover()


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


def chat_template(family_name: str) -> str:
    """The Jinja chat template of `family_name`, as stored in tokenizer_config.json (package data, so it works
    from an installed wheel)."""
    get_family(family_name)
    return (files(__name__) / family_name / "chat_template.jinja").read_text(encoding="utf-8")


__all__ = [
    "FAMILIES",
    "NEUTRAL_TARGETS",
    "AttentionKind",
    "Family",
    "ModelSpec",
    "chat_template",
    "family_of_hf_config",
    "get_family",
]
