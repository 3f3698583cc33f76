"""Tunix's PeftTrainer with crosstune's train step (crosstune.train.jax.train_step: the frozen base held once), its
training config, and the trainer of an abstract model (what `plan --compile` and `plan --run` build).
"""

from __future__ import annotations

import functools

from flax import nnx
from jax.interpreters import pxla
from tunix.sft import peft_trainer

from crosstune.train.jax.train_step import HeldOnceStep


class CrosstunePeftTrainer(peft_trainer.PeftTrainer):
    """PeftTrainer whose train step is a HeldOnceStep (tunix's eval step and everything else unchanged);
    `scoped_vmem_kib`: the recipe's backend.jax.scoped_vmem_kib, set by whoever builds the trainer."""

    scoped_vmem_kib: int | None = None

    def held_once_step(self) -> HeldOnceStep:
        mesh = pxla.thread_resources.env.physical_mesh
        return HeldOnceStep(self.create_train_step_fn(), self.model, self.optimizer, mesh, self.scoped_vmem_kib)

    def jit_train_and_eval_step(self, skip_jit: bool = False, cache_nnx_graph: bool = False):
        if skip_jit:
            return super().jit_train_and_eval_step(skip_jit, cache_nnx_graph)
        if self._jitted_train_step_fn is None:
            self._shard_optimizer(pxla.thread_resources.env.physical_mesh)
            # tunix reads `train_step.func.jitted_fn._cache_size()`: a partial over an object with `jitted_fn`
            self._jitted_train_step_fn = functools.partial(self.held_once_step(), self.model, self.optimizer)
            self._jitted_eval_step_fn = functools.partial(nnx.jit(self.create_eval_step_fn()), self.model)
        return self._jitted_train_step_fn, self._jitted_eval_step_fn


def training_config(accumulation: int, total_steps: int, checkpoints=None) -> peft_trainer.TrainingConfig:
    """The trainer's config: MultiSteps over `accumulation` micro-batches, inputs split over fsdp, one step in
    flight (honest per-step wall times), tunix's own progress bar off (crosstune's has the ETA), no evaluation;
    `checkpoints`: (root folder, save every N steps, keep last M), or None for no checkpoint manager."""
    import orbax.checkpoint as ocp

    root = every = keep = None
    if checkpoints is not None:
        root, every, keep = checkpoints
    return peft_trainer.TrainingConfig(
        eval_every_n_steps=total_steps + 1,
        max_steps=None,  # the iterator ends the run
        gradient_accumulation_steps=accumulation if accumulation > 1 else None,
        checkpoint_root_directory=None if root is None else str(root),
        checkpointing_options=None
        if root is None
        else ocp.CheckpointManagerOptions(
            save_decision_policy=ocp.checkpoint_managers.FixedIntervalPolicy(every), max_to_keep=keep
        ),
        data_sharding_axis=("fsdp",),
        max_inflight_computations=1,
        pbar_description=None,
    )


def abstract_trainer(model: nnx.Module, tx, config: peft_trainer.TrainingConfig) -> CrosstunePeftTrainer:
    """The trainer of an abstract model (ShapeDtypeStruct leaves), its optimizer abstract too: tunix builds the
    optimizer state eagerly in __init__ (MultiSteps' accumulator, AdamW's moments), so __init__ runs under
    nnx.eval_shape and nothing is allocated. `config` must have no checkpoint folder (nothing to restore)."""
    if config.checkpoint_root_directory is not None:
        raise ValueError("an abstract trainer has nothing to restore: build its config without checkpoints")
    made: list[CrosstunePeftTrainer] = []

    def build(m):
        made.append(CrosstunePeftTrainer(m, tx, config))
        return made[0].optimizer

    optimizer = nnx.eval_shape(build, model)
    trainer = made[0]
    trainer.model, trainer.optimizer = model, optimizer  # the traced copies leave with the trace
    return trainer
