"""The torch backend's base model: the HF checkpoint at `model.path` (recipe dtype on GPU, fp32 on CPU) with the
recipe's attention implementation, and its tokenizer."""

from __future__ import annotations

from typing import Any

from crosstune.recipe import Recipe, resolve_path


def build_model(recipe: Recipe, *, on_gpu: bool) -> tuple[Any, Any]:
    """The base model (recipe dtype on GPU, fp32 on CPU) and its tokenizer, from `recipe.model.path`."""
    import torch
    from transformers import AutoTokenizer

    from crosstune.train.torch.kernels import load_causal_lm

    path = resolve_path(recipe, recipe.model.path)
    if path is None or not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path: no HF checkpoint (config.json) at {path}")
    dtype = getattr(torch, recipe.model.dtype) if on_gpu else torch.float32
    model = load_causal_lm(recipe, path, dtype, on_gpu=on_gpu)  # train.kernels.attention, model.random_init
    model.config.use_cache = False  # packed rows need per-document masks, which transformers skips with a cache
    return model, AutoTokenizer.from_pretrained(path)
