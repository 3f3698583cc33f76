"""Tunix's PeftTrainer with a train step that holds the frozen base once (the one place crosstune wraps tunix's jit).

Tunix 0.1.7 jits its step as `nnx.jit(train_step, donate_argnames=("optimizer",))`. nnx.jit (graph updates on)
returns the state of every argument, and a top-level jit doesn't forward an unchanged input to its output, so XLA
copies every frozen base weight into the step's outputs: a second copy of the base per device (~16 GB per chip
for Gemma 4 31B on a v5p-8 at tp=4). Here the same step body (`create_train_step_fn()`: tunix's loss, grads,
optimizer update) runs inside a jax.jit over the split state: the frozen base (`nnx.Param` but not
`nnx.LoRAParam`) is an input only; everything the step changes (LoRA params, dropout RNG counts, the optimizer
state with MultiSteps' accumulator) is donated and comes back in place, pinned to its own sharding (without the
pin XLA may pick another layout for some LoRA leaves and the second step compiles again). Why not upstream:
docs/DESIGN_NOTES.md, "crosstune.train.jax.trainer".
"""

from __future__ import annotations

import functools

import jax
from flax import nnx
from jax.interpreters import pxla
from tunix.sft import peft_trainer

TRAIN_STEP_NAME = "crosstune_train_step"  # the compiled function's name: CompileTimer looks for it
FROZEN = nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))  # the base weights the step reads and never writes


class HeldOnceStep:
    """`body(model, optimizer, inputs)` jitted over (frozen base, the rest of the model, optimizer state, inputs),
    donating the last two state groups. Call it like the body; `lower` gives the same program for any (abstract)
    model, optimizer and inputs of the same structure."""

    def __init__(self, body, model: nnx.Module, optimizer: nnx.Optimizer, mesh) -> None:
        model_def, _, rest = nnx.split(model, FROZEN, ...)
        opt_def, opt_state = nnx.split(optimizer)

        def crosstune_train_step(frozen, rest, opt_state, inputs):
            model = nnx.merge(model_def, frozen, rest)
            optimizer = nnx.merge(opt_def, opt_state)
            out = body(model, optimizer, inputs)
            return out, nnx.state(model, nnx.Not(FROZEN)), nnx.state(optimizer)

        pins = None if mesh.empty else (nnx.get_named_sharding(rest, mesh), nnx.get_named_sharding(opt_state, mesh))
        self.jitted_fn = jax.jit(
            crosstune_train_step,
            donate_argnums=(1, 2),
            out_shardings=None if pins is None else (None, *pins),
        )

    @staticmethod
    def _args(model, optimizer, inputs) -> tuple:
        _, frozen, rest = nnx.split(model, FROZEN, ...)
        return frozen, rest, nnx.state(optimizer), inputs

    def __call__(self, model: nnx.Module, optimizer: nnx.Optimizer, inputs):
        out, rest, opt_state = self.jitted_fn(*self._args(model, optimizer, inputs))
        nnx.update(model, rest)
        nnx.update(optimizer, opt_state)
        return out

    def lower(self, model: nnx.Module, optimizer: nnx.Optimizer, inputs) -> jax.stages.Lowered:
        return self.jitted_fn.lower(*self._args(model, optimizer, inputs))


class CrosstunePeftTrainer(peft_trainer.PeftTrainer):
    """PeftTrainer whose train step is a HeldOnceStep (tunix's eval step and everything else unchanged)."""

    def held_once_step(self) -> HeldOnceStep:
        return HeldOnceStep(
            self.create_train_step_fn(), self.model, self.optimizer, pxla.thread_resources.env.physical_mesh
        )

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
