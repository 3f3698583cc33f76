"""FlexAttention for Gemma 3/4 on packed rows: attention that skips cross-document and out-of-window blocks.

`train.kernels.attention: flex` registers `crosstune_flex` with transformers' AttentionInterface (the attention
call) and AttentionMaskInterface (the mask). transformers already composes the mask *function* per layer type:
causal (full layers) or causal + sliding window (sliding layers), AND same-document, the documents found from
position ids restarting at 0 (packed, padding-free rows; `use_cache=False`). We turn that function into a BlockMask
once per forward and layer type, so FlexAttention visits only blocks that hold an allowed (query, key) pair: a
4096-token row of ~450-token documents touches ~1/9 of the causal blocks instead of all of them.

Why not transformers' own "flex_attention": its attention call always goes through torch.compile (no eager path for
CPU tests), it passes no kernel options (the default Triton blocks do not fit head_dim 512 in shared memory, see
`flex_kernel_options`), and its mask builder compiles `create_block_mask` on CPU too. The mask function, the GQA
handling and the softcap score_mod are the same as transformers'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FLEX = "crosstune_flex"  # the attn_implementation name registered with transformers
# BlockMask granularity (tokens): torch's default; the Triton tiles below divide it.
SPARSE_BLOCK = 128

_compiled_flex: Callable | None = None


def flex_kernel_options(head_dim: int) -> dict[str, int] | None:
    """Triton block sizes for FlexAttention at `head_dim`; None keeps torch's defaults (they fit up to 256).

    head_dim 512 (Gemma 4 global layers), bf16, on an H100/H200 (232,448 B of shared memory per block):
    the forward kernel holds a Q tile (BLOCK_M × D) and, per pipeline stage, a K and a V tile (BLOCK_N × D each).
    torch's default for D > 256 is BLOCK_M 64, BLOCK_N 32, 3 stages:
        64·512·2 + 3 · 2 · 32·512·2 = 65,536 + 196,608 = 262,144 B (+1,024 B bookkeeping = 263,168 B: the failure)
    Two stages keep the same tiles and drop one K/V buffer pair:
        64·512·2 + 2 · 2 · 32·512·2 = 65,536 + 131,072 = 196,608 B (+1,024 = 197,632 B) < 232,448 B.
    The backward keeps torch's D > 256 choice, stated here so a torch upgrade cannot change it silently: 16-row
    tiles, one stage; its largest kernel holds K, V (BLOCK_N1 × D) and Q, dO (BLOCK_M1 × D):
        4 · 16·512·2 = 65,536 B, with the fp32 dK/dV accumulators (2 · 16·512·4 B) in registers.
    """
    if head_dim <= 256:
        return None
    return {
        "fwd_BLOCK_M": 64,
        "fwd_BLOCK_N": 32,
        "fwd_num_stages": 2,
        "fwd_num_warps": 4,
        "bwd_BLOCK_M1": 16,
        "bwd_BLOCK_N1": 16,
        "bwd_BLOCK_M2": 16,
        "bwd_BLOCK_N2": 16,
        "bwd_num_stages": 1,
        "bwd_num_warps": 4,
    }


def _flex_for(device_type: str) -> Callable:
    """torch.compile'd flex_attention on GPUs (the fused Triton kernel); the eager reference elsewhere.

    The eager path computes the same masked, soft-capped attention densely: it is what the CPU tests exercise."""
    global _compiled_flex
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    if device_type != "cuda":
        return flex_attention
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention)  # dynamic shapes after the first new row length
    return _compiled_flex


def flex_attention_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    softcap: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Any, None]:
    """The AttentionInterface call: q [B, H, L, D], k/v [B, KV, L, D] -> ([B, L, H, D], no weights)."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    if dropout > 0:
        raise ValueError(f"{FLEX}: attention dropout {dropout} is not supported; set the model's attention_dropout 0")
    if not isinstance(attention_mask, BlockMask):
        raise TypeError(
            f"{FLEX}: expected a BlockMask from the {FLEX} mask builder, got {type(attention_mask).__name__}; "
            "pass no attention_mask (packed rows carry position_ids) and use_cache=False"
        )

    def soft_cap(score, batch, head, q_idx, kv_idx):
        return softcap * torch.tanh(score / softcap)

    out = _flex_for(query.device.type)(
        query,
        key,
        value,
        score_mod=soft_cap if softcap is not None else None,
        block_mask=attention_mask,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
        kernel_options=flex_kernel_options(query.shape[-1]) if query.device.type == "cuda" else None,
    )
    return out.transpose(1, 2).contiguous(), None


def flex_block_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function: Callable | None = None,
    attention_mask: Any = None,
    device: Any = "cpu",
    **kwargs: Any,
) -> Any:
    """The AttentionMaskInterface call: transformers' composed mask function (causal or sliding, same document,
    padding) as a BlockMask. `create_block_mask` is compiled on GPUs (a dense [L, L] pass otherwise)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask
    from transformers.masking_utils import (
        add_offsets_to_mask_function,
        and_masks,
        causal_mask_function,
        padding_mask_function,
        prepare_padding_mask,
    )

    mask_function = mask_function or causal_mask_function
    if attention_mask is not None:
        padding = prepare_padding_mask(attention_mask, kv_length, kv_offset)
        mask_function = and_masks(mask_function, padding_mask_function(padding))
    mask_function = add_offsets_to_mask_function(mask_function, q_offset, kv_offset)
    return create_block_mask(
        mask_function,
        B=batch_size,
        H=None,
        Q_LEN=q_length,
        KV_LEN=kv_length,
        device=device,
        BLOCK_SIZE=SPARSE_BLOCK,
        _compile=torch.device(device).type == "cuda",
    )


def register_flex_attention() -> str:
    """Register `crosstune_flex` with transformers (idempotent) and return the attn_implementation name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(FLEX, flex_attention_forward)
    AttentionMaskInterface.register(FLEX, flex_block_mask)
    return FLEX


def attention_implementation(choice: str, *, on_gpu: bool) -> str:
    """The attn_implementation for `train.kernels.attention`: sdpa / eager as transformers has them, or flex."""
    if choice != "flex":
        return choice
    if not on_gpu:
        raise ValueError(
            "train.kernels.attention: flex trains on a CUDA GPU only (torch has no FlexAttention backward on CPU); "
            "use attention: sdpa here"
        )
    return register_flex_attention()
