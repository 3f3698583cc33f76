"""The demo's split of the synthetic task families: the base learns some, the LoRA teaches and is scored on others,
so a pass@1 gain is something the fine-tune taught."""

from __future__ import annotations

from crosstune.synth.tasks import FAMILIES

# The families the demo's LoRA teaches and evaluates on: short, regular modules a LoRA learns in minutes.
HELD_OUT_FAMILIES = ("vector_gate", "parity_popcount", "gray_code", "decoder")  # registry order
# The base learns the other families, less the longest one (Moore/Mealy FSMs: ~700-token records, twice the rest).
UNUSED_FAMILIES = ("sequence_detector",)
BASE_FAMILIES = tuple(f.name for f in FAMILIES if f.name not in HELD_OUT_FAMILIES + UNUSED_FAMILIES)
