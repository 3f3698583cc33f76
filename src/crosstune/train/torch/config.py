"""The torch backend's TRL / accelerate settings: the recipe mapped onto SFTConfig, every TRL default that differs
from the recipe set explicitly. What a user's `trl sft` config says too (optimizer, schedule, batch, precision,
recompute, FSDP2, checkpoints) comes from crosstune.recipe.training_arguments, which `recipe export --to trl` writes
from: one mapping for both; this module adds what only a pre-tokenized in-process run needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crosstune.recipe import Recipe
from crosstune.recipe.training_arguments import training_arguments, uses_fsdp
from crosstune.run.layout import CHECKPOINTS
from crosstune.train.step_plan import warmup_steps


def parallelism(recipe: Recipe, world_size: int, on_gpu: bool) -> str:
    """How the devices share the work, in words (the launch line, run.json's details)."""
    if world_size == 1:
        return "one device"
    if not uses_fsdp(recipe, world_size):
        return "DDP"
    return "FSDP2" if on_gpu else "DDP (accelerate runs FSDP as DDP on CPU)"


def sft_config(recipe: Recipe, run_dir: Path, steps: int, *, world_size: int = 1, progress: bool = True) -> Any:
    """SFTConfig from the recipe. Every TRL/Trainer default that differs from the recipe is set here explicitly
    (TRL 1.16: gradient_checkpointing=True, bf16=True, lr 2e-5, logging every 10 steps, linear schedule, ...)."""
    import torch
    from trl import SFTConfig

    from crosstune.train.torch.layers import gradient_checkpointing_kwargs

    t = recipe.train
    on_gpu = torch.cuda.is_available()
    return SFTConfig(
        output_dir=str(run_dir / CHECKPOINTS),
        # optimizer, schedule, batch, precision, recompute, sharding, logging, checkpoints: the recipe's, as an
        # exported `trl sft` config says them (crosstune.recipe.training_arguments); the warm-up in steps of this run
        **{**training_arguments(recipe, world_size, on_gpu), "warmup_steps": warmup_steps(t, steps)},
        max_steps=steps,  # from max_steps or epochs (the step plan); the rows already repeat per epoch
        num_train_epochs=1,
        use_cpu=not on_gpu,
        gradient_checkpointing_kwargs=gradient_checkpointing_kwargs(t.kernels),  # + TRL's `selective` key
        ddp_find_unused_parameters=False,
        ddp_broadcast_buffers=False,  # Gemma's buffers are constants; re-broadcast per step (gloo), rank 1 drifted
        # data: already tokenized, masked and packed by `crosstune data prepare`, in the order it fixed
        packing=False,
        padding_free=True,
        max_length=None,
        completion_only_loss=True,
        assistant_only_loss=False,
        shuffle_dataset=False,
        train_sampling_strategy="sequential",
        dataloader_drop_last=False,
        dataloader_num_workers=0,
        average_tokens_across_devices=True,
        remove_unused_columns=True,
        # logging and checkpoints: crosstune writes metrics.jsonl/TensorBoard itself (StepMetricsCallback)
        logging_strategy="steps",
        logging_first_step=False,
        report_to="none",
        disable_tqdm=not progress,
        save_strategy="steps",
        save_only_model=False,
        eval_strategy="no",
    )
