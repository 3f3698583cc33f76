"""CPU equivalence of crosstune's FlexAttention path with the reference attention, and of the decoder-layer switches
(`train.kernels` lora_input_cast, compile, recompute) with their reference paths (the figures in docs/BENCHMARKS.md).

Tiny Gemma 4 and Gemma 3 (random, fp32), LoRA r=4 with non-zero B on all seven targets, one packed 256-token row
of four documents (70, 90, 45, 51 tokens; the sliding window is 32), loss and every LoRA gradient, FlexAttention
eager (torch has no FlexAttention backward on CPU; the eager path is its dense reference math, see
tests/train/torch/test_attention.py) against sdpa and eager. Also the same row as one document, to show the size of a
masking mistake. The decoder-layer switches on the same row: no LoRA input cast vs PEFT's cast under bf16 autocast
(bf16 base, fp32 LoRA), compiled vs eager decoder layers (fp32, gradient checkpointing on), full and selective
recompute vs none (fp32); tests/train/torch/test_layers.py asserts them.

    .venv/bin/python bench/kernels_equivalence.py
"""

from __future__ import annotations

import torch
import torch.nn.attention.flex_attention as flex

from crosstune.train.torch.attention import FLEX, register_flex_attention
from crosstune.train.torch.equivalence import (
    DOC_LENGTHS,
    bf16_base_fp32_lora,
    loss_and_lora_grads,
    loss_grads_and_ops,
    packed_row,
    run_with_casting,
    tiny_peft_model,
)


def compare(ref: tuple, other: tuple) -> tuple[float, float, float]:
    """(|Δloss|, max |Δgrad|, max over tensors of max |Δgrad| / max |grad|)."""
    (ref_loss, ref_grads), (loss, grads) = ref, other
    abs_diff = max((grads[n] - g).abs().max().item() for n, g in ref_grads.items())
    rel_diff = max(((grads[n] - g).abs().max() / g.abs().max()).item() for n, g in ref_grads.items())
    return abs(loss - ref_loss), abs_diff, rel_diff


def main() -> None:
    flex._validate_device = lambda *tensors: None  # eager FlexAttention backward on CPU (see the docstring)
    register_flex_attention()
    print(f"packed row: documents {DOC_LENGTHS}, sliding window 32; LoRA gradients of all seven targets")
    print("| model | compared | max abs Δloss | max abs Δgrad | max Δgrad / max abs grad (per tensor) |")
    print("|---|---|---|---|---|")
    for family in ("gemma4", "gemma3"):
        model, spec = tiny_peft_model(family)
        batch = packed_row(spec.vocab_size)
        runs = {impl: loss_and_lora_grads(model, batch, impl) for impl in ("sdpa", "eager", FLEX)}
        merged = dict(batch, position_ids=torch.arange(sum(DOC_LENGTHS))[None])
        runs["one document"] = loss_and_lora_grads(model, merged, "sdpa")
        for a, b in (("sdpa", FLEX), ("eager", FLEX), ("sdpa", "eager"), ("sdpa", "one document")):
            dl, dg, rel = compare(runs[a], runs[b])
            label = f"{b} vs {a}" if b != "one document" else "control: same row as one document (sdpa)"
            print(f"| tiny {family} | {label} | {dl:.1e} | {dg:.1e} | {rel:.1e} |")
    layer_switches()


def layer_switches() -> None:
    """`train.kernels` lora_input_cast / compile / recompute against their reference paths, same table layout."""
    from crosstune.families import get_family
    from crosstune.train.torch.layers import compile_decoder_layers

    for family in ("gemma4", "gemma3"):
        model, spec = bf16_base_fp32_lora(family)
        batch = packed_row(spec.vocab_size)
        cast, no_cast = (run_with_casting(model, batch, lora_input_cast=c, autocast=True)[:2] for c in (True, False))
        rows = {"lora_input_cast false vs true (bf16 autocast)": (cast, no_cast)}
        none = loss_grads_and_ops(family, "none")[:2]
        for mode in ("full", "selective"):
            rows[f"recompute {mode} vs none (fp32)"] = (none, loss_grads_and_ops(family, mode)[:2])
        model, spec = tiny_peft_model(family)
        model.base_model.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        eager_layers = loss_and_lora_grads(model, batch, "sdpa")
        compile_decoder_layers(model, get_family(family).decoder_layer_class)
        rows["compiled vs eager decoder layers (fp32)"] = (eager_layers, loss_and_lora_grads(model, batch, "sdpa"))
        for label, (ref, other) in rows.items():
            dl, dg, rel = compare(ref, other)
            print(f"| tiny {family} | {label} | {dl:.1e} | {dg:.1e} | {rel:.1e} |")


if __name__ == "__main__":
    main()
