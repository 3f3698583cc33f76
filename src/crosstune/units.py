"""Memory units, one owner: GB (10^9 bytes) and GiB (2^30 bytes), and every conversion between them and bytes.

Which figure is in which unit (each names its unit wherever a user sees it: a column header, a key's `_gb`/`_gib`
suffix, the words after the number):
- GB: what chips publish (crosstune.hardware `hbm_gb`, bandwidths in GB/s), so the planner's estimates, XLA's
  compiled figures set against them (`crosstune plan`, --compile, --search) and the bench tables beside them.
- GiB: what a run measures (metrics.jsonl `peak_memory_gib`: torch's max_memory_allocated, jax's
  peak_bytes_in_use + peak_bytes_reserved, host RSS) and what vLLM sizes its KV cache in (`serve plan`,
  VLLM_CPU_KVCACHE_SPACE).
A figure set beside one of the other unit is converted first (`gb_to_gib`): never 10^9 against 2^30.
"""

from __future__ import annotations

GB = 10**9
GIB = 2**30
MIB = 2**20  # resource limits (the eval sandbox's address space and files)


def bytes_to_gb(n: float) -> float:
    return n / GB


def bytes_to_gib(n: float) -> float:
    """Bytes as GiB, the unit of `peak_memory_gib` (both backends, and host RSS)."""
    return n / GIB


def gb_to_gib(x: float) -> float:
    """A figure in GB (a chip's HBM, a planner estimate) in GiB: × 10^9 / 2^30 (0.931)."""
    return x * GB / GIB
