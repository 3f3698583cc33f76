"""The small interface both training backends implement; the CLI and demo talk only to this."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from crosstune.recipe import Recipe

BACKEND_MODULES = {"torch": "crosstune.train.torch_backend", "jax": "crosstune.train.jax_backend"}


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    final_loss: float
    losses: list[float] = field(default_factory=list)
    adapter_dir: Path | None = None  # a PEFT adapter directory, when the backend writes one directly


class Backend(Protocol):
    def train(self, recipe: Recipe, run_dir: Path, *, resume: bool = False, progress: bool = True) -> TrainResult:
        """Train LoRA per `recipe` into `run_dir` (layout in crosstune.train.rundir); resume from its latest
        checkpoint when asked."""
        ...


def get_backend(name: str) -> Backend:
    if name not in BACKEND_MODULES:
        raise KeyError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_MODULES)}")
    return importlib.import_module(BACKEND_MODULES[name])  # type: ignore[return-value]
