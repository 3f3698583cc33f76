"""Train ↔ serve chat-template consistency. vLLM applies the chat template stored with the served tokenizer; the
training data was rendered with the template of the recipe's model, whose hash (with the tokenizer's) the prepared
data's manifest.json records. The seed trained Gemma 4 with Gemma 3's turn format and served it with Gemma 4's:
this check catches that before the server starts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from crosstune.recipe import Recipe


def template_sha256(model_dir: Path) -> tuple[str, str]:
    """(tokenizer + template hash as data preparation computes it, template-only sha256) of a model directory."""
    from transformers import AutoTokenizer

    from crosstune.data.prepared import tokenizer_hash

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return tokenizer_hash(tok), hashlib.sha256((tok.chat_template or "").encode()).hexdigest()


def check_template(recipe: Recipe, model_dir: Path) -> str | None:
    """Why the served tokenizer/template differs from the training data's (None: same, or no prepared data)."""
    from crosstune.data.prepared import prepared_dir

    manifest_path = prepared_dir(recipe) / "manifest.json"
    if not manifest_path.is_file():
        return None
    trained = json.loads(manifest_path.read_text()).get("tokenizer_hash")
    served, template = template_sha256(model_dir)
    if trained is None or trained == served:
        return None
    return (
        f"the served tokenizer/chat template of {model_dir} (sha256 {served[:16]}…, template alone {template[:16]}…) "
        f"differs from the one the training data was prepared with ({manifest_path}: tokenizer_hash {trained[:16]}…): "
        "answers would be prompted in another turn format than the model was trained on"
    )


def check_export_template(model_dir: Path) -> str | None:
    """Why the template served from an export differs from the one its run's data was rendered with (the run records
    it in run.json, export in export_manifest.json's source); None when equal or not recorded."""
    manifest = Path(model_dir) / "export_manifest.json"
    if not manifest.is_file():
        return None
    trained = json.loads(manifest.read_text()).get("source", {}).get("chat_template_sha256")
    if not trained:
        return None
    _, served = template_sha256(model_dir)
    if served == trained:
        return None
    return (
        f"the chat template served from {model_dir} (sha256 {served[:16]}…) is not the one the exported run's data "
        f"was prepared with ({manifest}: chat_template_sha256 {trained[:16]}…)"
    )
