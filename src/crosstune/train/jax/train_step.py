"""The jax train step: `crosstune_train_step`, one micro-step of tunix's step body (loss, gradients, optimizer
update) over the model split into its frozen base and what the step changes, jitted by `HeldOnceStep` so that the
frozen base is held once.

Tunix 0.1.7 jits its step as `nnx.jit(train_step, donate_argnames=("optimizer",))`. nnx.jit (graph updates on)
returns the state of every argument, and a top-level jit doesn't forward an unchanged input to its output, so XLA
copies every frozen base weight into the step's outputs: a second copy of the base per device (~16 GB per chip
for Gemma 4 31B on a v5p-8 at tp=4). Here the same step body (`create_train_step_fn()`: tunix's loss, grads,
optimizer update) runs inside a jax.jit over the split state: the frozen base (`nnx.Param` but not
`nnx.LoRAParam`) is an input only; everything the step changes (LoRA params, dropout RNG counts, the optimizer
state with MultiSteps' accumulator) is donated and comes back in place, pinned to its own sharding (without the
pin XLA may pick another layout for some LoRA leaves and the second step compiles again); on a TPU mesh it is
compiled with crosstune.train.jax.xla_options (the LoRA dropout's sharded RNG, the chip's scoped VMEM). Why not
upstream: docs/DESIGN_NOTES.md, "crosstune.train.jax.train_step".
"""

from __future__ import annotations

import functools

import jax
from flax import nnx

from crosstune.train.jax.tracing import linear_tracing
from crosstune.train.jax.xla_options import compiler_options

TRAIN_STEP_NAME = "crosstune_train_step"  # the compiled function's name: CompileTimer looks for it
FROZEN = nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))  # the base weights the step reads and never writes


def crosstune_train_step(graphs, body, frozen, rest, opt_state, inputs):
    """One micro-step: the model and optimizer merged from (`graphs`: their graph definitions) the frozen base,
    the rest of the model and the optimizer state, `body(model, optimizer, inputs)` run on them (tunix's step:
    loss, gradients, MultiSteps' accumulate-or-update), and (its output, the model's changed state, the optimizer
    state) returned."""
    model_def, opt_def = graphs
    model = nnx.merge(model_def, frozen, rest)
    optimizer = nnx.merge(opt_def, opt_state)
    out = body(model, optimizer, inputs)
    return out, nnx.state(model, nnx.Not(FROZEN)), nnx.state(optimizer)


class HeldOnceStep:
    """`crosstune_train_step` of `body` jitted over (frozen base, the rest of the model, optimizer state, inputs),
    donating the middle two, compiled with crosstune.train.jax.xla_options (`scoped_vmem_kib`: the recipe's
    backend.jax.scoped_vmem_kib). Call it like the body; `lower` gives the same program for any (abstract) model,
    optimizer and inputs of the same structure."""

    def __init__(
        self, body, model: nnx.Module, optimizer: nnx.Optimizer, mesh, scoped_vmem_kib: int | None = None
    ) -> None:
        linear_tracing()  # the step's trace probes a tracer's sharding per dropout draw (crosstune.train.jax.tracing)
        model_def, _, rest = nnx.split(model, FROZEN, ...)
        opt_def, opt_state = nnx.split(optimizer)
        pins = None if mesh.empty else (nnx.get_named_sharding(rest, mesh), nnx.get_named_sharding(opt_state, mesh))
        self.jitted_fn = jax.jit(
            functools.partial(crosstune_train_step, (model_def, opt_def), body),
            donate_argnums=(1, 2),
            out_shardings=None if pins is None else (None, *pins),
            compiler_options=compiler_options(mesh, scoped_vmem_kib),
        )

    @staticmethod
    def split_args(model, optimizer, inputs) -> tuple:
        """The jitted function's arguments: (frozen base, the rest of the model, optimizer state, inputs)."""
        _, frozen, rest = nnx.split(model, FROZEN, ...)
        return frozen, rest, nnx.state(optimizer), inputs

    def __call__(self, model: nnx.Module, optimizer: nnx.Optimizer, inputs):
        out, rest, opt_state = self.jitted_fn(*self.split_args(model, optimizer, inputs))
        nnx.update(model, rest)
        nnx.update(optimizer, opt_state)
        return out

    def lower(self, model: nnx.Module, optimizer: nnx.Optimizer, inputs) -> jax.stages.Lowered:
        return self.jitted_fn.lower(*self.split_args(model, optimizer, inputs))
