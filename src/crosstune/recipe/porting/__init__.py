"""`recipe import` and `recipe export` for the tools users port from: Axolotl, TRL (`trl sft --config`) and
LLaMA-Factory. One key table per format (`<tool>_keys`), read by both directions: each key's type, the tool's
default, the recipe setting of the same meaning, or why it changes no trained number. An import reads the user's
config once through its table into typed, bounded values (`typed`), then maps it (`from_<tool>`): the model
(`named_model`: its identity, QLoRA, LoRA targets), the data (`named_data`), the training settings (`training`) and
the target hardware with the global batch (`target`); every key ends mapped, not mapped (why, and the nearest
setting) or ignored (`port`). An export (`to_<tool>`) writes the table's keys from the recipe, in the table's
order."""

from crosstune.recipe.porting.port import ImportRefused, Port, Unmapped

__all__ = ["ImportRefused", "Port", "Unmapped"]
