"""Merge a torch run's PEFT adapter into its base model: an HF directory transformers and vLLM load as is.

The base's own config.json is copied unchanged (merge_and_unload + save_pretrained rewrites Gemma 4 fields such as
global_head_dim into `per_layer_config`, which other readers may not know), as are its tokenizer and generation
config. Weights are safetensors shards of at most `max_shard_size` (with model.safetensors.index.json when
there are several).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from crosstune.train.rundir import read_run_metadata

COPIED = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
)


def merge_adapter(
    adapter_dir: Path, base_dir: Path, out_dir: Path, *, dtype: str | None = None, max_shard_size: str = "5GB"
) -> Path:
    """Write base + adapter (W + alpha/r · B @ A) to `out_dir`, atomically; returns `out_dir`.

    `dtype` (float32 | bfloat16) defaults to the base checkpoint's own."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    adapter_dir, base_dir, out_dir = Path(adapter_dir), Path(base_dir), Path(out_dir)
    if not (adapter_dir / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{adapter_dir}: no adapter_config.json (expected a PEFT adapter directory)")
    base_cfg = json.loads((base_dir / "config.json").read_text())
    torch_dtype = getattr(torch, dtype) if dtype else _checkpoint_dtype(base_cfg)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch_dtype)
    merged = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()

    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    merged.save_pretrained(tmp, safe_serialization=True, max_shard_size=max_shard_size)
    for name in COPIED:  # the base's files win over what save_pretrained wrote
        if (base_dir / name).is_file():
            shutil.copy2(base_dir / name, tmp / name)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir


def merge_run(run_dir: Path, out_dir: Path | None = None, **kwargs: Any) -> Path:
    """Merge <run>/adapter into the run's base model (from run.json), into `out_dir` (default <run>/merged)."""
    run_dir = Path(run_dir)
    meta = read_run_metadata(run_dir)
    if not meta.get("base_model"):
        raise ValueError(f"{run_dir}/run.json names no base_model directory to merge into")
    return merge_adapter(run_dir / "adapter", Path(meta["base_model"]), out_dir or run_dir / "merged", **kwargs)


def _checkpoint_dtype(cfg: dict):
    import torch

    name = cfg.get("dtype") or cfg.get("torch_dtype") or cfg.get("text_config", {}).get("dtype") or "float32"
    return getattr(torch, name)
