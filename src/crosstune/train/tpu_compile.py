"""The jax train step compiled ahead of time for a TPU topology, as `crosstune plan` and bench/ reach it (only
crosstune.train reaches the backends): the compile in a child process with libtpu (crosstune.train.jax.compile), the
recompute mode a recipe asks for, the files whose code makes the compiled program (what a cached compile depends
on), and the step built from abstract weights for a program of one's own to be set beside it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstune.recipe import Recipe
from crosstune.train.jax.compile import child_env, compile_step, find_libtpu
from crosstune.train.jax.remat import remat_mode

__all__ = ["AbstractStep", "abstract_train_step", "compile_step", "find_libtpu", "remat_mode", "step_code_files",
           "tpu_child_env"]  # fmt: skip

# crosstune.train.jax's modules that make the compiled program or read it
STEP_CODE = ("aot", "attention", "logits", "lora", "model", "remat", "step", "trainer")


def step_code_files() -> list[Path]:
    """The source files of STEP_CODE: a compile's result depends on their text."""
    return [Path(__file__).parent / "jax" / f"{name}.py" for name in STEP_CODE]


def tpu_child_env(accelerator: str) -> dict[str, str]:
    """The environment a child process compiles for a TPU topology in (`accelerator`: e.g. v5p-8): libtpu from
    `make tpu-compile-env` on its path, JAX on CPU; LibtpuMissing says how to install it."""
    return child_env(find_libtpu(), accelerator)


@dataclass(frozen=True)
class AbstractStep:
    """The recipe's train step for its TPU topology from abstract weights (nothing read or allocated): `step` is the
    trainer's own (HeldOnceStep), `trainer` tunix's PeftTrainer around the same model and optimizer. Run in a
    process started with tpu_child_env."""

    device_kind: str
    mesh: Any
    step: Any
    trainer: Any
    inputs: Any

    def memory(self, program: Any) -> Any:
        """XLA's memory_analysis of `program` (a jitted function of model, optimizer and inputs, e.g. `step`)
        compiled under the step's mesh."""
        from crosstune.train.jax.model import mesh_context

        with mesh_context(self.mesh):
            lowered = program.lower(self.trainer.model, self.trainer.optimizer, self.inputs)
            return lowered.compile().memory_analysis()


def abstract_train_step(recipe: Recipe, layers: int | None = None) -> AbstractStep:
    """The recipe's step (its first `layers` decoder layers, or all) on its TPU topology's mesh."""
    from crosstune.train.jax.aot import abstract_step, hf_config, topology_mesh

    _, kind, mesh = topology_mesh(recipe)
    step, trainer, inputs, _, _ = abstract_step(recipe, hf_config(recipe, layers), mesh)
    return AbstractStep(kind, mesh, step, trainer, inputs)
