"""The families' chat templates (Jinja, as `tokenizer.apply_chat_template` renders them)."""

from __future__ import annotations

from importlib.resources import files


def chat_template(family_name: str) -> str:
    """The Jinja chat template of `family_name` ("gemma3" | "gemma4"), as stored in tokenizer_config.json."""
    resource = files(__package__) / f"{family_name}.jinja"
    if not resource.is_file():
        known = sorted(p.name.removesuffix(".jinja") for p in files(__package__).iterdir() if p.name.endswith(".jinja"))
        raise KeyError(f"no chat template for family {family_name!r}; known: {', '.join(known)}")
    return resource.read_text(encoding="utf-8")
