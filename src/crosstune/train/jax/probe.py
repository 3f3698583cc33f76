"""The jax backend's step probe (crosstune.train.backend.StepProbe): the loss and LoRA gradients of one optimizer
step of k micro-batches on given rows, with a given LoRA installed, and one AdamW step, through the backend's own
training code: crosstune.train.jax.batches.optimizer_steps attaches loss_weight = k / N to every micro-batch and tunix's
optax.MultiSteps averages the k gradients (here the same average is taken by hand): the step's token-weighted mean.
Fused k/v LoRAs are held as the exact rank-2r block LoRA, their off-diagonal gradient blocks masked to zero.
"""

from __future__ import annotations

import numpy as np

from crosstune.data import grain_dataset
from crosstune.data.prepared import PreparedDataset
from crosstune.families import model_dir_spec
from crosstune.recipe import Recipe, model_path
from crosstune.run.lora_weights import LoraWeights
from crosstune.train.jax.data import global_batch
from crosstune.train.jax.lora import install_lora, lora_to_qwix, param_name, qwix_to_lora
from crosstune.train.step_plan import accumulation, constant_step


class JaxStepProbe:
    """The jax backend's tunix model on the recipe's (fsdp, tp) mesh with a given LoRA imported, and its loss on
    the rows of the recipe's first optimizer step (inputs split over fsdp as the trainer feeds them)."""

    def __init__(self, recipe: Recipe, prepared: PreparedDataset, lora: LoraWeights, rows: int, bf16: bool):
        from flax import nnx

        from crosstune.train.jax.batches import device_batch, optimizer_steps
        from crosstune.train.jax.loss import model_inputs
        from crosstune.train.jax.model import make_mesh, mesh_context

        self.recipe, self.lora, self.bf16 = recipe, lora, bf16
        self.recomputes = recipe.train.gradient_checkpointing  # tunix's remat, set when the model is built
        self.base = model_path(recipe)
        self.spec = model_dir_spec(self.base, recipe.model.family)
        self.k = accumulation(recipe.train, recipe.backend.jax.mesh.fsdp)  # the jax run's own step
        self.mesh = make_mesh(recipe.backend.jax.mesh.fsdp, recipe.backend.jax.mesh.tp)
        batches = grain_dataset(prepared, "train", batch_size=rows, seed=recipe.train.seed)
        micro = next(optimizer_steps((batches[i] for i in range(self.k)), self.k))
        self.tokens = int(micro[0]["step_trained_tokens"])
        with mesh_context(self.mesh):
            self.inputs = [model_inputs(global_batch(device_batch(m), self.mesh)) for m in micro]
            self.model, self.masks = self._build(0.0)  # the exact checks run without dropout
        self._loss_and_grad = nnx.jit(self._loss_and_grad)  # compiled once: before and after the step

    def _build(self, dropout: float):
        from crosstune.train.jax.config import ModelSettings
        from crosstune.train.jax.model import build_model

        dtype = "bfloat16" if self.bf16 else "float32"
        settings = ModelSettings.of(self.recipe, "cpu").replace(
            dtype=dtype, compute_dtype=dtype, lora=self.recipe.lora.model_copy(update={"dropout": dropout}), seed=0
        )
        model, _ = build_model(self.recipe.model.family, self.base, self.mesh, **settings.kwargs())
        return model, install_lora(model, self.lora, self.spec)

    @staticmethod
    def _loss_and_grad(model, inputs):
        from flax import nnx

        from crosstune.train.jax.loss import loss_fn

        return nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.LoRAParam))(model, **inputs)

    def _step_loss(self, model, with_grads: bool):
        """Mean over the k micro-batches of (loss, grads), as optax.MultiSteps averages them."""
        import jax

        from crosstune.train.jax.model import mesh_context

        loss, grads = 0.0, None
        with mesh_context(self.mesh):
            for inputs in self.inputs:
                value, g = self._loss_and_grad(model, inputs)
                loss += float(value) / self.k
                if with_grads:
                    g = jax.tree.map(lambda x: x / self.k, g)
                    grads = g if grads is None else jax.tree.map(lambda a, b: a + b, grads, g)
        return loss, grads

    def _named(self, tree) -> dict[str, np.ndarray]:
        import jax

        return {param_name(p): np.asarray(v, np.float32) for p, v in jax.tree_util.tree_leaves_with_path(tree)}

    def loss_and_grads(self) -> tuple[float, dict]:

        loss, self.grads = self._step_loss(self.model, with_grads=True)
        self.flat = self._named(self.grads)
        for name, mask in self.masks.items():  # block k/v LoRAs stay exact PEFT pairs (crosstune.families.lora_layout)
            self.flat[name] = self.flat[name] * mask
        lora = self.lora
        return loss, qwix_to_lora(self.flat, self.spec, rank=lora.rank, alpha=lora.alpha).modules

    def sample_losses(self, samples: int, seed: int, dropout: float) -> list[float]:
        """The step's loss under `samples` dropout draws, on a second model built with LoRA dropout `dropout`."""
        from flax import nnx

        from crosstune.train.jax.model import mesh_context

        with mesh_context(self.mesh):
            model, _ = self._build(dropout)
        out = []
        for i in range(samples):
            model.set_attributes(qwix_rngs=nnx.Rngs(dropout=seed + i))
            out.append(self._step_loss(model, with_grads=False)[0])
        return out

    def step(self, freeze: dict) -> tuple[float, dict]:
        from flax import nnx

        from crosstune.train.jax.model import mesh_context
        from crosstune.train.jax.optimizer import make_optimizer

        lora = self.lora
        frozen, _ = lora_to_qwix(
            LoraWeights(lora.family, lora.rank, lora.alpha, lora.targets, freeze), self.spec, False
        )
        flat = {k: v * (1.0 - frozen[k]).astype(v.dtype) for k, v in self.flat.items()}
        with mesh_context(self.mesh):
            nnx.replace_by_pure_dict(self.grads, _nest(flat, self.grads))
            tx, _ = make_optimizer(constant_step(self.recipe), total_steps=1)
            optimizer = nnx.Optimizer(self.model, tx, wrt=nnx.LoRAParam)
            nnx.jit(lambda opt, model, grads: opt.update(model, grads))(optimizer, self.model, self.grads)
            weights = self._named(nnx.state(self.model, nnx.LoRAParam))
        after = self._step_loss(self.model, with_grads=False)[0]
        return after, qwix_to_lora(weights, self.spec, rank=lora.rank, alpha=lora.alpha).modules


def _nest(flat: dict[str, np.ndarray], state) -> dict:
    """Dotted names -> the nested pure dict of `state` (for nnx.replace_by_pure_dict)."""
    import jax

    return jax.tree_util.tree_map_with_path(lambda p, _: flat[param_name(p)], state.to_pure_dict())
