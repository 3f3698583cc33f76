"""How the torch backend runs the decoder layers (`train.kernels`): LoRA input casts, torch.compile, recompute.

Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.train.torch.layers"."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

# Graphs per decoder-layer forward: layer types × (first layer, whose input needs no gradient) × (static, dynamic
# row length) and Gemma 4's KV-storing layers; torch's default recompile limit (8) would silently fall back to eager.
COMPILE_RECOMPILE_LIMIT = 64


def lora_input_casting(model: Any, kernels: Any) -> AbstractContextManager:
    """A context in which `model`'s LoRA layers cast their inputs as `train.kernels.lora_input_cast` says."""
    from peft.helpers import disable_input_dtype_casting

    return disable_input_dtype_casting(model, active=not kernels.lora_input_cast)


def compile_decoder_layers(model: Any, layer_class: str) -> int:
    """torch.compile every `layer_class` module of `model` in place; returns how many. Call it after PEFT has
    wrapped the projections (compilation is lazy: the first forward traces what the layer holds then)."""
    import torch

    layers = [m for m in model.modules() if type(m).__name__ == layer_class]
    if not layers:
        raise RuntimeError(f"train.kernels.compile: the model has no {layer_class} modules to compile")
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, COMPILE_RECOMPILE_LIMIT)
    for layer in layers:
        layer.compile()
    return len(layers)


def gradient_checkpointing_kwargs(kernels: Any) -> dict[str, Any]:
    """SFTConfig.gradient_checkpointing_kwargs: non-reentrant checkpointing, plus TRL's `selective` key for
    `recompute: selective` (TRL strips it before torch.utils.checkpoint sees it)."""
    if not kernels.recomputes_matmuls:  # dots, dots_and_attention
        raise ValueError(
            f"train.kernels.recompute {kernels.recompute!r} is the jax backend's matmul-saving policy "
            "(jax.checkpoint_policies.dots_with_no_batch_dims_saveable); TRL and PEFT have no such policy for the "
            "torch backend: use recompute full or selective"
        )
    kwargs: dict[str, Any] = {"use_reentrant": False}
    if kernels.recompute == "selective":
        kwargs["selective"] = True
    return kwargs
