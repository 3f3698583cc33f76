"""The torch backend's base model: the HF checkpoint at `model.path` (recipe dtype on GPU, fp32 on CPU) with the
recipe's attention implementation, and its tokenizer. Under FSDP2 over several devices the model starts on the
meta device and each rank reads only its shard once accelerate has sharded it (sharded_load.py)."""

from __future__ import annotations

from typing import Any

from crosstune.errors import InputError
from crosstune.recipe import Recipe, model_path

# Where accelerate's FSDP2 really shards: on CPU it runs FSDP as DDP, whose ranks need the whole weights.
SHARDING_DEVICES = ("cuda",)


def loads_by_shard(recipe: Recipe, world_size: int, device_type: str) -> bool:
    """Whether each rank builds the base on the meta device and reads only its FSDP2 shard of the checkpoint."""
    tb = recipe.backend.torch
    return tb.fsdp and world_size > 1 and device_type in SHARDING_DEVICES and not recipe.model.random_init


def build_model(recipe: Recipe, *, on_gpu: bool, empty: bool = False) -> tuple[Any, Any]:
    """The base model (recipe dtype on GPU, fp32 on CPU) and its tokenizer, from `recipe.model.path`; `empty`:
    parameters on the meta device (`loads_by_shard`)."""
    import torch
    from transformers import AutoTokenizer

    from crosstune.train.torch.kernels import load_causal_lm

    path = model_path(recipe)
    if path is None or not (path / "config.json").is_file():
        raise InputError(f"model.path: no HF checkpoint (config.json) at {path}: give an HF model folder")
    dtype = getattr(torch, recipe.model.dtype) if on_gpu else torch.float32
    model = load_causal_lm(recipe, path, dtype, on_gpu=on_gpu, empty=empty)  # kernels.attention, model.random_init
    model.config.use_cache = False  # packed rows need per-document masks, which transformers skips with a cache
    return model, AutoTokenizer.from_pretrained(path)
