"""Train ↔ serve chat-template consistency. vLLM applies the chat template stored with the served tokenizer; the
training data was rendered with the template of the recipe's model, whose hash (with the tokenizer's) the prepared
data's manifest.json records. The seed trained Gemma 4 with Gemma 3's turn format and served it with Gemma 4's:
this check catches that before the server starts. A merged export and an adapter are checked the same way: the
template their run's data was rendered with (export_manifest.json, or the run's run.json) against the one served
(the merged folder's tokenizer, or the base's for an adapter, which vLLM serves with the base's tokenizer)."""

from __future__ import annotations

import hashlib
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
    from crosstune.untrusted_files import read_json

    manifest = read_json(manifest_path, "prepare the data again")
    trained = manifest.get("tokenizer_hash") if isinstance(manifest, dict) else None
    served, template = template_sha256(model_dir)
    if trained is None or trained == served:
        return None
    return (
        f"the served tokenizer/chat template of {model_dir} (sha256 {served[:16]}…, template alone {template[:16]}…) "
        f"differs from the one the training data was prepared with ({manifest_path}: tokenizer_hash {trained[:16]}…): "
        "answers would be prompted in another turn format than the model was trained on"
    )


def recorded_template(trained: Path) -> tuple[str, Path] | None:
    """(sha256 of the chat template the training data was rendered with, the file recording it) for a merged
    export or an exported adapter (export_manifest.json's source) or a run's own adapter folder (the run's
    run.json); None when nothing records it."""
    from crosstune.export.export_folder import MANIFEST, read_export_manifest
    from crosstune.run.layout import ADAPTER, RUN_JSON
    from crosstune.run.records import read_run_record

    trained = Path(trained)
    if (trained / MANIFEST).is_file():
        recorded = read_export_manifest(trained).source.chat_template_sha256
        return (recorded, trained / MANIFEST) if recorded else None
    if trained.name == ADAPTER and (trained.parent / RUN_JSON).is_file():
        recorded = read_run_record(trained.parent).data.chat_template_sha256
        return (recorded, trained.parent / RUN_JSON) if recorded else None
    return None


def check_trained_template(served_dir: Path, trained: Path) -> str | None:
    """Why the template vLLM serves (the tokenizer of `served_dir`) differs from the one the run behind `trained`
    (a merged export, or an adapter served on top of `served_dir`) was trained with; None when equal or unknown."""
    from transformers import AutoTokenizer

    from crosstune.data.prepared import chat_template_hash

    found = recorded_template(trained)
    if found is None:
        return None
    recorded, where = found
    served = chat_template_hash(AutoTokenizer.from_pretrained(str(served_dir)))
    if served == recorded:
        return None
    what = f"{served_dir}" if Path(served_dir) == Path(trained) else f"the base {served_dir} (adapter {trained})"
    return (
        f"the chat template served from {what} (sha256 {served[:16]}…) is not the one the run's data was "
        f"prepared with ({where}: chat_template_sha256 {recorded[:16]}…)"
    )


def check_export_template(model_dir: Path) -> str | None:
    """check_trained_template for a merged export served on its own."""
    return check_trained_template(model_dir, model_dir)
