"""The torch backend's checkpoints: `<run>/checkpoints/checkpoint-N` (PEFT adapter + optimizer state, renamed
into place whole; listed by crosstune.run.layout.step_folders) and the fixed staging names of half-written ones."""

from __future__ import annotations

STAGING = ".staging"  # checkpoints are written here, then renamed into place (a crash leaves no half checkpoint)
ADAPTER_STAGING = ".adapter.tmp"  # the final adapter, likewise; one fixed name every rank agrees on (collective save)
