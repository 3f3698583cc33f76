"""How the torch backend runs the decoder layers (`train.kernels`): LoRA input casts, torch.compile, recompute.

- lora_input_cast: PEFT keeps the LoRA weights in fp32 (`get_peft_model`'s autocast_adapter_dtype) and casts each
  LoRA layer's input to that dtype before `lora_B(lora_A(x))`. Under bf16 autocast (train.precision bf16 on a GPU)
  F.linear then casts that fp32 copy back to bf16, together with a bf16 copy of the weight that autocast caches for
  the forward. So the LoRA matmuls already run in bf16; the input's round trip bf16 → fp32 → bf16 is exact and
  costs two activation-sized copies per LoRA module and pass (and two more for its gradient). `false` skips it
  with PEFT's own switch (peft.helpers.disable_input_dtype_casting). The fp32 master lives where it always did:
  the PEFT lora_A / lora_B parameters themselves, which the optimizer updates and whose gradients autocast
  returns in fp32; the bf16 weights are autocast's per-forward cast. Under fp32 nothing is cast either way.
- compile: `nn.Module.compile()` on every decoder layer: the layer compiles its own forward in place, so module
  names, checkpoints, gradient checkpointing (transformers' GradientCheckpointingLayer wraps the compiled call)
  and FSDP2's per-layer wrapping are unchanged (FSDP2 with compiled layers needs GPUs: not tested on CPU, where
  several processes run DDP). Layers of one type share their compiled graphs (parameters are graph inputs); a new
  row length recompiles once, after which the sequence dimension is dynamic. Inductor calls the SDPA kernel through
  the dispatcher, so selective recompute still keeps its outputs in compiled layers.
- recompute: `selective` is TRL's selective activation checkpointing (trl.models.
  enable_selective_activation_checkpointing, switched on by SFTConfig's gradient_checkpointing_kwargs
  `selective`): torch's create_selective_checkpoint_contexts with a policy that saves the SDPA kernels' outputs
  (flash, memory-efficient, cuDNN, CPU flash) and recomputes everything else, so the backward runs no attention
  forward again. Eager and FlexAttention are not aten SDPA ops: the policy would keep nothing of them, so the recipe
  refuses `selective` with `attention: eager | flex`.
"""

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
    kwargs: dict[str, Any] = {"use_reentrant": False}
    if kernels.recompute == "selective":
        kwargs["selective"] = True
    return kwargs


def recomputes_attention(kernels: Any) -> bool:
    """Whether activation recompute runs the attention forward again (hfu counts it, the planner keeps its outputs
    otherwise). The recipe allows `selective` with SDPA attention only, whose outputs TRL's policy keeps."""
    return kernels.recompute == "full"
