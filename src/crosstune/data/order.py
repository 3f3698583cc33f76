"""The one row order both backends read: seeded shuffle per epoch, then a strided slice per data-parallel rank.

Both adapters call `rank_order`, so rank r of the torch backend and rank r of the JAX backend see the same rows in
the same order. It is plain numpy (no Grain, no torch sampler) so either side computes it alone.
"""

from __future__ import annotations

import numpy as np


def epoch_permutation(n_rows: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The rows of one epoch: a permutation drawn from (seed, epoch), or 0..n-1 without shuffling."""
    if not shuffle:
        return np.arange(n_rows, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(n_rows).astype(np.int64)


def rank_order(
    n_rows: int,
    *,
    seed: int,
    epochs: int = 1,
    rank: int = 0,
    world_size: int = 1,
    shuffle: bool = True,
    even: bool = True,
) -> np.ndarray:
    """Row indices rank `rank` of `world_size` reads, epoch after epoch.

    Each epoch's permutation is split by stride: rank r takes positions r, r + W, r + 2W, ... . Without `even`
    the ranks' slices are disjoint and together cover every row exactly once per epoch (sizes may differ by 1).
    With `even` (the default, so ranks stay in lockstep) the permutation is first extended by wrapping around to a
    multiple of W, as torch's DistributedSampler does: at most W - 1 rows per epoch are read twice.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    parts = []
    for epoch in range(epochs):
        perm = epoch_permutation(n_rows, seed, epoch, shuffle)
        if even and n_rows and n_rows % world_size:
            perm = np.resize(perm, -(-n_rows // world_size) * world_size)  # np.resize repeats from the start
        parts.append(perm[rank::world_size])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
