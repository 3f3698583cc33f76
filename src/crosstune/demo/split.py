"""The demo's split of the synthetic task families: the base learns some (crosstune.pretrain.base_model's
BASE_FAMILIES), the LoRA teaches and is scored on others, so a pass@1 gain is something the fine-tune taught."""

from __future__ import annotations

# The families the demo's LoRA teaches and evaluates on: short, regular modules a LoRA learns in minutes.
HELD_OUT_FAMILIES = ("vector_gate", "parity_popcount", "gray_code", "decoder")  # registry order
