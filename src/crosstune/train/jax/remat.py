"""Activation recompute on the jax backend: the matmul-saving policy (the mode a recipe asks for:
crosstune.train.jax.config.remat_mode).

- None: nothing recomputed (`train.gradient_checkpointing: false`): every activation kept for the backward.
- "full": tunix's RematConfig.DECODER, each decoder layer's forward run again in the backward, only its input kept
  (`gradient_checkpointing: true`, `kernels.recompute: full`; what the torch backend does too).
- "dots": each decoder layer under `jax.checkpoint` with `jax.checkpoint_policies.dots_with_no_batch_dims_saveable`
  (`kernels.recompute: dots`): the outputs of its weight matmuls (q/k/v/o, gate/up/down and their LoRA) are kept,
  the norms, activations, RoPE and the attention itself (batched einsums or the splash kernel) are recomputed.
  The torch backend refuses this value (crosstune.train.torch.layers): it has no such policy.
- "selective" (torch: keep PyTorch's SDPA outputs) has no jax meaning: refused, saying what to use.
"""

from __future__ import annotations

import inspect

import jax
from flax import nnx
from tunix.models.gemma3 import model as gemma3
from tunix.models.gemma4 import model as gemma4

POLICY = jax.checkpoint_policies.dots_with_no_batch_dims_saveable
DECODER_LAYERS = (gemma4.DecoderLayer, gemma3.DecoderLayer)
_SAVING: dict[type, type] = {}


def _saving(cls: type) -> type:
    """`cls` (a tunix decoder layer) whose call runs its block under remat with POLICY."""
    if cls not in _SAVING:
        signature = inspect.signature(cls.block)

        def __call__(self, *args, **kwargs):
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()  # nnx.remat passes positional arguments only
            return nnx.remat(cls.block, policy=POLICY, graph_updates=False)(*bound.args)

        _SAVING[cls] = type(f"MatmulSaving{cls.__name__}", (cls,), {"__call__": __call__, "__module__": __name__})
    return _SAVING[cls]


def save_matmuls(model: nnx.Module) -> int:
    """Put every decoder layer of `model` under the matmul-saving remat (in place); the number of layers."""
    n = 0
    for _, module in model.iter_modules():
        if type(module) in DECODER_LAYERS:
            module.__class__ = _saving(type(module))
            n += 1
    return n
