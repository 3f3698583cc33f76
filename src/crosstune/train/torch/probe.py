"""The torch backend's step probe (crosstune.train.backend.StepProbe): the loss and LoRA gradients of one optimizer
step of k micro-batches on given rows, with a given LoRA installed, and one AdamW step, through the backend's own
training code: the CrosstuneSFTTrainer's dataloader, collator and compute_loss, with the step's trained-token count
passed as `num_items_in_batch` to every micro-batch (what Trainer does under accumulation); gradients accumulate
over the micro-batches: the step's token-weighted mean.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from crosstune.data import torch_dataset
from crosstune.data.prepared import PreparedDataset
from crosstune.recipe import Recipe
from crosstune.run.lora_weights import LoraWeights
from crosstune.train.step_plan import accumulation, constant_step


class TorchStepProbe:
    """The torch backend's model, trainer (dataloader + collator + compute_loss) and a given LoRA, on the rows of
    the recipe's first optimizer step."""

    def __init__(self, recipe: Recipe, prepared: PreparedDataset, lora: LoraWeights, rows: int, bf16: bool):
        import torch

        from crosstune.train.torch.callbacks import CrosstuneSFTTrainer
        from crosstune.train.torch.config import sft_config
        from crosstune.train.torch.lora import install_lora_weights, lora_config, peft_lora_params
        from crosstune.train.torch.model import build_model

        torch.manual_seed(0)
        # one process reads the rows jax spreads over fsdp: the same micro-batches, the same accumulation
        self.recipe, self.lora, self.k = recipe, lora, accumulation(recipe.train, recipe.backend.jax.mesh.fsdp)
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

    def _set_dropout(self, p: float) -> None:
        """PEFT's LoRA dropout (nn.Dropout on each module's input; an Identity when built with p = 0) set to `p`,
        and the given LoRA back in place of a stepped one."""
        import torch

        from crosstune.train.torch.lora import install_lora_weights

        install_lora_weights(self.model, self.lora)
        for module in self.model.modules():
            if isinstance(getattr(module, "lora_dropout", None), torch.nn.ModuleDict):
                for key in module.lora_dropout:
                    module.lora_dropout[key] = torch.nn.Dropout(p)

    def sample_losses(self, samples: int, seed: int, dropout: float) -> list[float]:
        """The step's loss under `samples` independent LoRA dropout draws at `dropout` (no gradients)."""
        import torch

        self._set_dropout(dropout)
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
        train = constant_step(self.recipe)
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
