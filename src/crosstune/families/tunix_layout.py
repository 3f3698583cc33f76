"""HF nn.Linear weights <-> Tunix einsum kernels: the conversions the family tables name (docs/TUNIX_LAYOUT.md).

Shapes: D hidden, N heads, K KV heads, H head_dim, F intermediate. HF Linear weights are [out, in].
"""

from __future__ import annotations

import numpy as np


def heads_to_tunix(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """q/k/v_proj (N·H, D) -> (N, D, H)."""
    out, d = weight.shape
    return weight.T.reshape(d, num_heads, out // num_heads).transpose(1, 0, 2)


def heads_from_tunix(kernel: np.ndarray) -> np.ndarray:
    """(N, D, H) -> q/k/v_proj (N·H, D)."""
    n, d, h = kernel.shape
    return kernel.transpose(1, 0, 2).reshape(d, n * h).T


def kv_to_tunix(k_weight: np.ndarray, v_weight: np.ndarray, num_kv_heads: int) -> np.ndarray:
    """k_proj, v_proj -> kv_einsum (2, K, D, H), stacked [k, v]."""
    return np.stack([heads_to_tunix(k_weight, num_kv_heads), heads_to_tunix(v_weight, num_kv_heads)])


def kv_from_tunix(kernel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return heads_from_tunix(kernel[0]), heads_from_tunix(kernel[1])


def o_to_tunix(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """o_proj (D, N·H) -> attn_vec_einsum (N, H, D)."""
    d, nh = weight.shape
    return weight.T.reshape(num_heads, nh // num_heads, d)


def o_from_tunix(kernel: np.ndarray) -> np.ndarray:
    n, h, d = kernel.shape
    return kernel.reshape(n * h, d).T


def mlp_to_tunix(weight: np.ndarray) -> np.ndarray:
    """gate/up/down_proj [out, in] -> kernel [in, out]."""
    return weight.T


mlp_from_tunix = mlp_to_tunix  # a transpose is its own inverse
