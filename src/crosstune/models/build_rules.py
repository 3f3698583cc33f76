"""What both writers of `crosstune model build` follow (transformers' model classes with torch, numpy without): how
the random weights are drawn, and how the tensors are split into exactly N shards.

The draws are transformers' initialisation (Linear and embedding weights normal(0, initializer_range), norms at
their identity, layer scalars 1) with the values a converter could get wrong moved away from their init values.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from crosstune.errors import CrosstuneError


class ModelOptionError(CrosstuneError):
    """A `crosstune model build` option the build can't take; the message names the option and the choices."""


class ShardCountError(ModelOptionError, ValueError):
    """`--shards N` the model's tensors can't be split into (the command prefixes the option)."""


# Embedding std of the small models (hidden size up to SMALL_HIDDEN): with transformers' 0.02 their tied-embedding
# logits stay within about ±1, too small for a wrong softcap or norm mapping to show in a logits comparison; 0.1
# gives logits of several units. Larger models keep transformers' own 0.02: logits grow with sqrt(hidden), and 0.1
# at hidden 5376 saturates the softcap (a loss of ~27 on a 262,144 vocabulary instead of ~13).
EMBED_STD = 0.1
SMALL_HIDDEN = 128
# Router weight std of the MoE models (any size): the router sees unit-RMS inputs scaled by 1/sqrt(hidden), so its
# expert scores have about this std. With transformers' 0.02 they are near-uniform and the top-k choice flips under
# the two stacks' different fp32 rounding after one training step (a router of a real checkpoint is decisive).
ROUTER_STD = 1.0
# Parameters randomised around their init value: norm weights, the MoE router's scales (init 1), each by a uniform
# draw within ±SCALE_JITTER; layer scalars (init 1) are drawn from LAYER_SCALAR.
SCALES = re.compile(r"(?:norm(?:_\d)?\.weight|router\.scale|router\.per_expert_scale)$")
ROUTER_SCALES = ("router.scale", "router.per_expert_scale")
SCALE_JITTER = 0.5
LAYER_SCALAR = (0.5, 1.5)


def exact_shard_limit(files_at: Callable[[int], int], total: int, shards: int) -> int:
    """The smallest shard size limit (bytes) at which huggingface_hub's splitter gives exactly `shards` files
    (`files_at`: limit -> file count; save_pretrained takes a size, not a count). `total`: every tensor's bytes."""
    lo, hi = 1, max(total, 1)
    while lo < hi:  # the count only falls as the limit grows
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if files_at(mid) <= shards else (mid + 1, hi)
    if files_at(lo) != shards:
        raise ShardCountError(
            f"the model's tensors can't be split into exactly {shards} shards (the nearest is {files_at(lo)})"
        )
    return lo
