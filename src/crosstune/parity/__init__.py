"""`crosstune parity`: the same weights and rows through both backends (one step: loss, LoRA gradients, one
optimizer step), through the training session's step probe; check runs it, table shows it."""
