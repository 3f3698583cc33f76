"""The torch backend's switchable fast paths (`train.kernels`) and the benchmarks' random-init model.

- attention: sdpa (default) / eager / flex (crosstune.train.torch.attention).
- loss: `trl` (default) is TRL 1.16's fused LM head: per-token log-probabilities in tiles of 4096 tokens × 32,768
  vocabulary entries with fp32 accumulation and Gemma's final-logit softcap, only at labelled positions (on GPUs);
  the [tokens, 262144] logits never exist. `cce` is cut-cross-entropy 25.1.1's fused linear + cross-entropy
  Triton kernel with `filter_eps=None`: its default gradient filtering drops vocabulary blocks whose softmax
  gradient is below bf16 resolution, which is not exact; with the filter off the logits are accumulated in fp32
  tiles, soft-capped and reduced without ever being rounded to bf16. (liger-kernel 0.8.5's fused linear CE rounds
  each logit chunk to the input dtype — bf16 — before the softcap and softmax: not exact for a softcapped 262k head.)
- token_metrics: TRL asks its fused head, for every micro-batch, for each labelled token's entropy and top-1 flag
  (extra accumulators over all 262k vocabulary entries in every tile), gathers them and reads three values back to
  the host (`.item()` on entropy, accuracy and token count), which drains the GPU queue once per micro-batch.
  `false` asks the fused head for log-probabilities only and skips those metrics; the loss is the same number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CCE_PACKAGE = "cut-cross-entropy==25.1.1"


# --- model ------------------------------------------------------------------------------------------------------
def load_causal_lm(recipe: Any, path: Path, dtype: Any, *, on_gpu: bool, empty: bool = False) -> Any:
    """The HF causal LM at `path` with the recipe's attention; `model.random_init` builds it from config.json
    with random weights instead (benchmarks: the 31B shape without a 62 GB checkpoint), on the GPU when there is
    one (host RAM and CPU init time stay small). `empty`: its parameters on the meta device, for FSDP2 ranks that
    read only their shard after sharding (sharded_load.py)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from crosstune.train.torch.attention import attention_implementation

    kernels = recipe.train.kernels
    attn = attention_implementation(kernels.attention, on_gpu=on_gpu)
    if kernels.loss == "cce":
        require_cce(on_gpu=on_gpu)
    if empty:
        from crosstune.train.torch.sharded_load import empty_causal_lm

        return empty_causal_lm(path, dtype, attn)
    if not recipe.model.random_init:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn)
    config = AutoConfig.from_pretrained(path)
    torch.manual_seed(recipe.train.seed)
    with torch.device("cuda" if on_gpu else "cpu"):
        return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)


def require_cce(*, on_gpu: bool) -> None:
    """Refuse `loss: cce` where it cannot run, saying what to do."""
    if not on_gpu:
        raise RuntimeError(
            "train.kernels.loss: cce runs Triton kernels on a CUDA GPU and this process has none; use loss: trl"
        )
    try:
        import cut_cross_entropy  # noqa: F401
    except ImportError as err:
        raise RuntimeError(
            f"train.kernels.loss: cce needs the {CCE_PACKAGE} package (with triton): pip install '{CCE_PACKAGE}'"
        ) from err


# --- trainer ----------------------------------------------------------------------------------------------------
def kernel_trainer_class(trainer_cls: type, kernels: Any) -> type:
    """`trainer_cls` itself with the default kernels; otherwise a subclass whose compute_loss takes the chosen
    loss path without TRL's per-step token metrics."""
    if kernels.loss == "trl" and kernels.token_metrics:
        return trainer_cls
    return type(f"Lean{trainer_cls.__name__}", (LeanLossMixin, trainer_cls), {"crosstune_kernels": kernels})


class LeanLossMixin:
    """compute_loss without TRL's entropy / token-accuracy metrics (and their host syncs): the loss of TRL's
    default branch (fused LM head, log-probabilities only) or cut-cross-entropy's, normalised the same way."""

    crosstune_kernels: Any

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        from trl.trainer.utils import add_fused_lm_head

        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        # Re-patch the head TRL patched for ("log_probs", "entropy", "is_top1"): log-probabilities only.
        add_fused_lm_head(base, outputs=("log_probs",))
        if self.crosstune_kernels.loss == "cce":
            add_cce_lm_head(base)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        import torch

        if return_outputs:  # TRL would rebuild the full logits and read the metrics this trainer no longer computes
            raise ValueError(
                "compute_loss(return_outputs=True) needs TRL's token metrics and full logits: set "
                "train.kernels.token_metrics true and loss trl"
            )
        inputs["use_cache"] = False
        if self.crosstune_kernels.loss == "cce":
            loss = model(**inputs, crosstune_cce=True, num_items_in_batch=num_items_in_batch).loss
        else:
            outputs = model(**inputs, fused_lm_head=True)
            num_tokens = outputs.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
            loss = -outputs.log_probs.sum() / torch.as_tensor(num_tokens).clamp(min=1)
        # as TRL: num_items_in_batch counts every rank's tokens and DDP/FSDP average the gradients over ranks
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * (self.accelerator.num_processes // self.get_tp_size())
        return loss


def add_cce_lm_head(model: Any) -> None:
    """`model(..., labels=…, crosstune_cce=True)` returns the token-summed cross-entropy of the shifted labels /
    num_items_in_batch from cut-cross-entropy's fused kernel (softcap inside, filtering off); other calls are the
    model's own forward. Patched on the instance like TRL's fused head, so PEFT/FSDP wrappers call through it."""
    import types

    from transformers.modeling_outputs import CausalLMOutput

    original_forward = model.forward
    softcap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)

    def forward(self, *args, crosstune_cce=False, labels=None, num_items_in_batch=None, **kwargs):
        if not crosstune_cce:
            if labels is not None:
                kwargs["labels"] = labels
            if num_items_in_batch is not None:
                kwargs["num_items_in_batch"] = num_items_in_batch
            return original_forward(*args, **kwargs)
        from cut_cross_entropy import linear_cross_entropy

        hidden = self.base_model(*args, **kwargs).last_hidden_state
        lm_head = self.get_output_embeddings()
        total = linear_cross_entropy(
            hidden, lm_head.weight, labels, softcap=softcap, reduction="sum", shift=True, filter_eps=None
        )
        count = (labels[:, 1:] != -100).sum() if num_items_in_batch is None else num_items_in_batch
        return CausalLMOutput(loss=total / count)

    model.forward = types.MethodType(forward, model)
