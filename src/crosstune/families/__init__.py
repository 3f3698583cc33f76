"""Model families: the single place that knows Gemma layouts, names, chat formats and FLOPs.

Each family is one folder (`families/<name>/`: `family.py` sizes and HF config, `tunix.py` the HF <-> Tunix table,
`chat_template.jinja`) whose package exports `FAMILY`; adding a family is adding a folder.
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib.resources import files
from pathlib import Path

from crosstune.errors import InputError
from crosstune.families.base import Family
from crosstune.families.spec import NEUTRAL_TARGETS, AttentionKind, ModelSpec
from crosstune.model_configs import decoder_config, read_model_config


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
    model_type = decoder_config(cfg).get("model_type")
    for fam in FAMILIES.values():
        if model_type in fam.hf_model_types:
            return fam
    raise KeyError(f"config.json model_type {model_type!r} is not a supported family ({', '.join(FAMILIES)})")


class FamilyMismatch(InputError):
    """A model folder of another family than the one asked for."""

    def __init__(self, message: str, found: Family):
        super().__init__(message)
        self.found = found


def model_dir_spec(model_dir: Path, family: str | None = None) -> ModelSpec:
    """The ModelSpec of an HF model folder's config.json (named after the folder), of `family` when given: an
    InputError names the file when it is missing, corrupt, of an unknown family or of another family."""
    cfg_path = Path(model_dir) / "config.json"
    if not cfg_path.is_file():
        raise InputError(f"{model_dir}: no config.json (point at an HF model directory)")
    cfg = read_model_config(cfg_path.parent)
    try:
        found = family_of_hf_config(cfg)
    except KeyError as e:
        raise InputError(f"{cfg_path}: {e.args[0]}") from None
    if family is not None and found.name != family:
        raise FamilyMismatch(f"{cfg_path}: a {found.name} model, not {family}", found)
    try:
        return found.spec_from_hf_config(cfg, name=Path(model_dir).name)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a field missing or of the wrong type
        what = f"{e.args[0]!r} missing or unknown" if isinstance(e, KeyError) else str(e)
        raise InputError(
            f"{cfg_path}: not a {found.name} config crosstune reads ({what}): restore it from the model's source"
        ) from None


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
    "FamilyMismatch",
    "ModelSpec",
    "chat_template",
    "family_of_hf_config",
    "get_family",
    "model_dir_spec",
]
