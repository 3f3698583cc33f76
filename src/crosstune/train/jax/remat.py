"""Activation recompute on the jax backend: the matmul-saving policy (the mode a recipe asks for:
crosstune.train.jax.config.remat_mode).

- None: nothing recomputed (`train.gradient_checkpointing: false`): every activation kept for the backward.
- "full": tunix's RematConfig.DECODER, each decoder layer's forward run again in the backward, only its input kept
  (`gradient_checkpointing: true`, `kernels.recompute: full`; what the torch backend does too).
- "dots": each decoder layer under `jax.checkpoint` with `jax.checkpoint_policies.dots_with_no_batch_dims_saveable`
  (`kernels.recompute: dots`): the outputs of its weight matmuls (q/k/v/o, gate/up/down and their LoRA) are kept,
  the norms, activations, RoPE and the attention itself (batched einsums or the splash kernel) are recomputed.
  The torch backend refuses this value (crosstune.train.torch.layers): it has no such policy.
- "dots_and_attention": "dots", and the splash kernel's residuals kept too (its output and logsumexp, which the
  kernel names SPLASH_RESIDUALS: crosstune.train.jax.attention), so the backward runs splash's backward kernel only,
  not its forward again: a layer keeps what an unrolled step without recompute keeps but the elementwise tensors
  (norms, RoPE, activations), which are recomputed. For a scan over layer groups (crosstune.train.jax.layer_scan),
  whose body saves every residual its linearization names when nothing is recomputed. Needs splash (the recipe
  refuses it with dense attention, whose [T, T] scores are what recompute avoids keeping).
- "selective" (torch: keep PyTorch's SDPA outputs) has no jax meaning: refused, saying what to use.
"""

from __future__ import annotations

import inspect

import jax
from flax import nnx
from tunix.models.gemma3 import model as gemma3
from tunix.models.gemma4 import model as gemma4

from crosstune.train.jax.attention import SPLASH_RESIDUALS

POLICY = jax.checkpoint_policies.dots_with_no_batch_dims_saveable
POLICY_WITH_ATTENTION = jax.checkpoint_policies.save_from_both_policies(
    POLICY, jax.checkpoint_policies.save_only_these_names(SPLASH_RESIDUALS)
)
DECODER_LAYERS = (gemma4.DecoderLayer, gemma3.DecoderLayer)
_SAVING: dict[tuple[type, bool, bool], type] = {}


def _saving(cls: type, keep_attention: bool, scanned: bool = False) -> type:
    """`cls` (a tunix decoder layer) whose call runs its block under remat with POLICY (POLICY_WITH_ATTENTION);
    `scanned`: without jax.checkpoint's barrier against CSE (`in_scan`)."""
    if (cls, keep_attention, scanned) not in _SAVING:
        signature = inspect.signature(cls.block)
        policy = POLICY_WITH_ATTENTION if keep_attention else POLICY

        def __call__(self, *args, **kwargs):
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()  # nnx.remat passes positional arguments only
            remat = nnx.remat(cls.block, policy=policy, prevent_cse=not scanned, graph_updates=False)
            return remat(*bound.args)

        kept = "MatmulAndAttention" if keep_attention else "Matmul"
        name = f"{'Scanned' if scanned else ''}{kept}Saving{cls.__name__}"
        _SAVING[cls, keep_attention, scanned] = type(name, (cls,), {"__call__": __call__, "__module__": __name__})
    return _SAVING[cls, keep_attention, scanned]


def save_matmuls(model: nnx.Module, *, keep_attention: bool = False) -> int:
    """Put every decoder layer of `model` under the matmul-saving remat (in place), keeping the splash kernel's
    residuals too when `keep_attention`; the number of layers. A layer of a subclass (the Gemma 4 MoE layers'
    ResidualRoutedLayer, crosstune.train.jax.moe) runs its own block under it."""
    n = 0
    for _, module in model.iter_modules():
        if isinstance(module, DECODER_LAYERS) and type(module) not in _SAVING.values():
            module.__class__ = _saving(type(module), keep_attention)
            n += 1
    return n


def in_scan(model: nnx.Module) -> int:
    """Every matmul-saving layer of `model` (save_matmuls) without jax.checkpoint's barrier against CSE
    (`prevent_cse=False`), for a model whose layers run in a scan (crosstune.train.jax.layer_scan); the number
    changed. There the forward and the backward are two loops, so XLA cannot merge a layer's recompute back into its
    forward, which is what the barrier prevents (jax.checkpoint's docs); and in the backward's loop the barrier made
    XLA copy each layer's slice of the stacked weights and kept outputs into buffers of their own before the
    matmuls read them: the 31B's first 4 layers with dots_and_attention, compiled for one v5e chip, hold 46
    dynamic-slice fusions and 17.99 GB with it, 5 and 15.32 GB without (docs/BENCHMARKS.md)."""
    n = 0
    for _, module in model.iter_modules():
        found = [key for key, cls in _SAVING.items() if type(module) is cls and not key[2]]
        if found:
            base, keep_attention, _ = found[0]
            module.__class__ = _saving(base, keep_attention, scanned=True)
            n += 1
    return n
