"""The plain transformers + PEFT training loop (no TRL, no Trainer): the baseline bench/gpu_train.sh divides by.

Same model (the recipe's, random init allowed), same LoRA, same prepared packed rows in the same order as
`crosstune train`, torch AdamW (fused on GPUs), bf16 autocast on GPUs, activation recompute as the recipe says.
Prints one JSON line: median s/step and tokens/s over steps 3..N, MFU without recompute (forward +
backward-to-activations model FLOPs, crosstune.families spec) and peak memory.

    python bench/gpu_plain_loop.py RECIPE STEPS [--set key=value ...]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from crosstune.data import load_prepared, torch_dataset
from crosstune.hardware import get_hardware
from crosstune.recipe import load_recipe
from crosstune.train.parts import torch_lora_model
from crosstune.units import bytes_to_gib


def main(recipe_file: str, steps: int, overrides: list[str]) -> dict:
    recipe = load_recipe(recipe_file, overrides)
    on_gpu = torch.cuda.is_available()
    device = "cuda" if on_gpu else "cpu"
    model, tokenizer, spec = torch_lora_model(recipe, on_gpu=on_gpu)  # the backend's base, LoRA and initial LoRA
    model = model.to(device)
    if recipe.train.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:  # fp32 LoRA weights, as PEFT/Trainer keep them
        p.data = p.data.float()
    t = recipe.train
    optimizer = torch.optim.AdamW(params, lr=t.learning_rate, weight_decay=t.weight_decay, fused=on_gpu)
    rows = torch_dataset(load_prepared(recipe, tokenizer), "train", seed=t.seed, epochs=2)
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)

    times, tokens = [], []
    for step in range(steps):
        row = rows[step % len(rows)]
        batch = {k: torch.tensor([row[k]], device=device) for k in ("input_ids", "position_ids", "labels")}
        sync()
        start = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=on_gpu and recipe.train.precision == "bf16"):
            loss = model(**batch, use_cache=False).loss  # no cache: per-document masks from the position ids
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        times.append(time.perf_counter() - start)
        tokens.append(batch["input_ids"].shape[1])
    measured = slice(2, None) if steps > 2 else slice(None)  # after CUDA/allocator warm-up
    tokens_per_s = statistics.median(n / s for n, s in zip(tokens[measured], times[measured], strict=True))
    peak = get_hardware(recipe.hardware).peak_tflops
    flops_per_token = spec.lora_train_flops_per_token(recipe.data.max_seq_len, recompute_activations=False)
    return {
        "s_per_step": statistics.median(times[measured]),
        "tokens_per_s": tokens_per_s,
        "mfu_no_recompute": flops_per_token * tokens_per_s / (peak * 1e12) if peak else None,
        "peak_memory_gib": bytes_to_gib(torch.cuda.max_memory_allocated()) if on_gpu else None,
        "final_loss": loss.item(),
    }


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    extra = [arg for arg in sys.argv[3:] if arg != "--set"]
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), extra)), flush=True)
