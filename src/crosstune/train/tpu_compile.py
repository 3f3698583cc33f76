"""The jax train step compiled ahead of time for a TPU topology, as `crosstune plan` reaches it (only crosstune.train
reaches the backends): the compile in a child process with libtpu (crosstune.train.jax.compile), the recompute
mode a recipe asks for, and the files whose code makes the compiled program (what a cached compile depends on)."""

from __future__ import annotations

from pathlib import Path

from crosstune.train.jax.compile import compile_step, find_libtpu
from crosstune.train.jax.remat import remat_mode

__all__ = ["compile_step", "find_libtpu", "remat_mode", "step_code_files"]

# crosstune.train.jax's modules that make the compiled program or read it
STEP_CODE = ("aot", "attention", "logits", "lora", "model", "remat", "step", "trainer")


def step_code_files() -> list[Path]:
    """The source files of STEP_CODE: a compile's result depends on their text."""
    return [Path(__file__).parent / "jax" / f"{name}.py" for name in STEP_CODE]
