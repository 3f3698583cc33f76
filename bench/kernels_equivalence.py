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

from crosstune.train.parts import torch_kernel_equivalence


def main() -> None:
    tables = {family: torch_kernel_equivalence(family) for family in ("gemma4", "gemma3")}
    print(f"packed row: documents {tables['gemma4'][0]}, sliding window 32; LoRA gradients of all seven targets")
    print("| model | compared | max abs Δloss | max abs Δgrad | max Δgrad / max abs grad (per tensor) |")
    print("|---|---|---|---|---|")
    for part in (1, 2):  # the attention rows of both families, then the decoder-layer switches'
        for family, table in tables.items():
            for label, dl, dg, rel in table[part]:
                print(f"| tiny {family} | {label} | {dl:.1e} | {dg:.1e} | {rel:.1e} |")


if __name__ == "__main__":
    main()
