"""The two sides of `crosstune parity` (crosstune.parity): each backend's own model, data path and loss on the same
rows, with the same LoRA installed, for one optimizer step of k micro-batches.

torch: the CrosstuneSFTTrainer's dataloader, collator and compute_loss, with the step's trained-token count passed
as `num_items_in_batch` to every micro-batch (what Trainer does under accumulation); gradients accumulate over the
micro-batches. jax: jax_step.optimizer_steps attaches loss_weight = k / N to every micro-batch and tunix's
optax.MultiSteps averages the k gradients; here the same average is taken by hand. Both are the step's
token-weighted mean.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from crosstune.export.lora import LoraWeights
from crosstune.families.spec import ModelSpec


def step_train(recipe):
    """The recipe's optimizer settings at a constant peak learning rate (no warmup: one step)."""
    return recipe.train.model_copy(update={"schedule": "constant", "warmup_steps": 0})


class TorchSide:
    """The torch backend's model, trainer (dataloader + collator + compute_loss) and the parity LoRA."""

    def __init__(self, recipe, prepared, lora: LoraWeights, rows: int, bf16: bool):
        import torch

        from crosstune.data import torch_dataset
        from crosstune.train.torch_backend import (
            build_model,
            install_lora_weights,
            lora_config,
            peft_lora_params,
            sft_config,
        )
        from crosstune.train.torch_callbacks import CrosstuneSFTTrainer

        torch.manual_seed(0)
        self.recipe, self.lora, self.k = recipe, lora, recipe.train.grad_accumulation
        model, tokenizer = build_model(recipe, on_gpu=bf16)  # on_gpu: the recipe's dtype (bf16) even on a CPU
        config, _ = lora_config(recipe, model)
        dataset = torch_dataset(prepared, "train", seed=recipe.train.seed).select(range(rows * self.k))
        with tempfile.TemporaryDirectory(prefix="crosstune-parity-") as tmp:
            args = sft_config(recipe, Path(tmp), steps=1, progress=False)
            args.per_device_train_batch_size = rows
            self.trainer = CrosstuneSFTTrainer(
                model=model,
                args=args,
                train_dataset=dataset,
                processing_class=tokenizer,
                peft_config=config,
                keep_last=1,
            )
        self.model = self.trainer.model
        if recipe.train.gradient_checkpointing:  # Trainer turns it on in train(), which parity doesn't call
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.recomputes = bool(self.model.get_base_model().is_gradient_checkpointing)
        self.params = peft_lora_params(self.model)
        install_lora_weights(self.model, lora)
        self.batches = list(self.trainer.get_train_dataloader())[: self.k]
        self.tokens = sum(int((b["labels"][..., 1:] != -100).sum()) for b in self.batches)
        self.model.train()

    def _losses(self, backward: bool) -> float:
        import torch

        total = 0.0
        for batch in self.batches:
            loss = self.trainer.compute_loss(self.model, dict(batch), num_items_in_batch=torch.tensor(self.tokens))
            if backward:
                loss.backward()
            total += loss.item()
        return total

    def loss_and_grads(self) -> tuple[float, dict]:
        loss = self._losses(backward=True)
        grads = {m: tuple(self.params[(m, p)].grad.float().numpy().copy() for p in "AB") for m in self.lora.modules}
        return loss, grads

    def set_dropout(self, p: float) -> None:
        """PEFT's LoRA dropout (nn.Dropout on each module's input; an Identity when built with p = 0) set to `p`,
        and the parity LoRA back in place of the stepped one (the jax side samples a fresh model)."""
        import torch

        from crosstune.train.torch_backend import install_lora_weights

        install_lora_weights(self.model, self.lora)
        for module in self.model.modules():
            if isinstance(getattr(module, "lora_dropout", None), torch.nn.ModuleDict):
                for key in module.lora_dropout:
                    module.lora_dropout[key] = torch.nn.Dropout(p)

    def sample_losses(self, samples: int, seed: int) -> list[float]:
        """The step's loss under `samples` independent dropout draws (no gradients)."""
        import torch

        out = []
        for i in range(samples):
            torch.manual_seed(seed + i)
            with torch.no_grad():
                out.append(self._losses(backward=False))
        return out

    def step(self, freeze: dict) -> tuple[float, dict]:
        """One AdamW step (frozen elements' gradients zeroed), then the loss; returns (loss, LoRA weights)."""
        import torch

        with torch.no_grad():
            for (m, part), p in self.params.items():
                p.grad.mul_(torch.from_numpy(1.0 - freeze[m][0 if part == "A" else 1]).to(p.grad.dtype))
        train = step_train(self.recipe)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        if train.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(trainable, train.max_grad_norm)
        torch.optim.AdamW(
            trainable,
            lr=train.learning_rate,
            betas=(train.adam_beta1, train.adam_beta2),
            eps=train.adam_eps,
            weight_decay=train.weight_decay,
        ).step()
        with torch.no_grad():
            after = self._losses(backward=False)
        weights = {
            m: tuple(self.params[(m, p)].detach().float().numpy().copy() for p in "AB") for m in self.lora.modules
        }
        return after, weights


class JaxSide:
    """The jax backend's tunix model on the recipe's (fsdp, tp) mesh with the parity LoRA imported, and its loss on
    the same rows (inputs split over fsdp as the trainer feeds them)."""

    def __init__(self, recipe, base: Path, spec: ModelSpec, prepared, lora: LoraWeights, rows: int, bf16: bool):
        from flax import nnx

        from crosstune.data import grain_dataset
        from crosstune.train.jax_data import global_batch
        from crosstune.train.jax_model import make_mesh, mesh_context
        from crosstune.train.jax_step import device_batch, model_inputs, optimizer_steps

        self.recipe, self.base, self.spec, self.lora, self.bf16 = recipe, base, spec, lora, bf16
        self.k = recipe.train.grad_accumulation
        self.mesh = make_mesh(recipe.backend.jax.mesh.fsdp, recipe.backend.jax.mesh.tp)
        batches = grain_dataset(prepared, "train", batch_size=rows, seed=recipe.train.seed)
        micro = next(optimizer_steps((batches[i] for i in range(self.k)), self.k))
        self.tokens = int(micro[0]["step_trained_tokens"])
        with mesh_context(self.mesh):
            self.inputs = [model_inputs(global_batch(device_batch(m), self.mesh)) for m in micro]
            self.model, self.masks = self._build(0.0)  # the exact checks run without dropout
        self._loss_and_grad = nnx.jit(self._loss_and_grad)  # compiled once: before and after the step

    def _build(self, dropout: float):
        from crosstune.export.jax_lora import install_lora
        from crosstune.train.jax_model import build_model

        dtype = "bfloat16" if self.bf16 else "float32"
        lora_section = self.recipe.lora.model_copy(update={"dropout": dropout})
        model, _ = build_model(
            self.recipe.model.family,
            self.base,
            self.mesh,
            dtype=dtype,
            compute_dtype=dtype,
            remat=self.recipe.train.gradient_checkpointing,
            lora=lora_section,
        )
        return model, install_lora(model, self.lora, self.spec)

    @staticmethod
    def _loss_and_grad(model, inputs):
        from flax import nnx

        from crosstune.train.jax_step import loss_fn

        return nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.LoRAParam))(model, **inputs)

    def _step_loss(self, model, with_grads: bool):
        """Mean over the k micro-batches of (loss, grads), as optax.MultiSteps averages them."""
        import jax

        from crosstune.train.jax_model import mesh_context

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

        from crosstune.export.jax_lora import param_name

        return {param_name(p): np.asarray(v, np.float32) for p, v in jax.tree_util.tree_leaves_with_path(tree)}

    def loss_and_grads(self) -> tuple[float, dict]:
        from crosstune.export.jax_lora import qwix_to_lora

        loss, self.grads = self._step_loss(self.model, with_grads=True)
        self.flat = self._named(self.grads)
        for name, mask in self.masks.items():  # block k/v LoRAs stay exact PEFT pairs (crosstune.families.lora_layout)
            self.flat[name] = self.flat[name] * mask
        lora = self.lora
        return loss, qwix_to_lora(self.flat, self.spec, rank=lora.rank, alpha=lora.alpha).modules

    def sample_losses(self, samples: int, seed: int, dropout: float) -> list[float]:
        """The step's loss under `samples` dropout draws, on a second model built with LoRA dropout `dropout`."""
        from flax import nnx

        from crosstune.train.jax_model import mesh_context

        with mesh_context(self.mesh):
            model, _ = self._build(dropout)
        out = []
        for i in range(samples):
            model.set_attributes(qwix_rngs=nnx.Rngs(dropout=seed + i))
            out.append(self._step_loss(model, with_grads=False)[0])
        return out

    def step(self, freeze: dict) -> tuple[float, dict]:
        from flax import nnx

        from crosstune.export.jax_lora import lora_to_qwix, qwix_to_lora
        from crosstune.train.jax_model import mesh_context
        from crosstune.train.jax_step import make_optimizer

        lora = self.lora
        frozen, _ = lora_to_qwix(
            LoraWeights(lora.family, lora.rank, lora.alpha, lora.targets, freeze), self.spec, False
        )
        flat = {k: v * (1.0 - frozen[k]).astype(v.dtype) for k, v in self.flat.items()}
        with mesh_context(self.mesh):
            nnx.replace_by_pure_dict(self.grads, _nest(flat, self.grads))
            tx, _ = make_optimizer(step_train(self.recipe), total_steps=1)
            optimizer = nnx.Optimizer(self.model, tx, wrt=nnx.LoRAParam)
            nnx.jit(lambda opt, model, grads: opt.update(model, grads))(optimizer, self.model, self.grads)
            weights = self._named(nnx.state(self.model, nnx.LoRAParam))
        after = self._step_loss(self.model, with_grads=False)[0]
        return after, qwix_to_lora(weights, self.spec, rank=lora.rank, alpha=lora.alpha).modules


def _nest(flat: dict[str, np.ndarray], state) -> dict:
    """Dotted names -> the nested pure dict of `state` (for nnx.replace_by_pure_dict)."""
    import jax

    from crosstune.export.jax_lora import param_name

    return jax.tree_util.tree_map_with_path(lambda p, _: flat[param_name(p)], state.to_pure_dict())
