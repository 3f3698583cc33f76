"""The torch backend's TRL / accelerate settings: the recipe mapped onto SFTConfig and FSDP2's config, every TRL
default that differs from the recipe set explicitly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crosstune.families import get_family
from crosstune.recipe import Recipe
from crosstune.run.layout import CHECKPOINTS
from crosstune.train.steps import accumulation

SCHEDULES = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}


def fsdp_settings(recipe: Recipe) -> dict[str, Any]:
    """FSDP2 settings (TrainingArguments.fsdp_config keys): the family's decoder layer is the sharding unit; under
    FSDP, activation checkpointing belongs here rather than in `gradient_checkpointing`."""
    return {
        "version": 2,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "transformer_layer_cls_to_wrap": [get_family(recipe.model.family).decoder_layer_class],
        "reshard_after_forward": True,
        "state_dict_type": "FULL_STATE_DICT",  # LoRA weights and their optimizer state are small
        "activation_checkpointing": recipe.train.gradient_checkpointing,
        # Off: accelerate 1.15's rank-0 loading gives rank 0 the whole model and fails on Gemma 4's persistent
        # `layer_scalar` buffers. Each rank reads only its own shard instead (sharded_load.py, after fully_shard).
        "cpu_ram_efficient_loading": False,
    }


def uses_fsdp(recipe: Recipe, world_size: int) -> bool:
    """FSDP2 is asked for and there is more than one device to shard over."""
    return recipe.backend.torch.fsdp and world_size > 1


def trains_in_bf16(recipe: Recipe, on_gpu: bool) -> bool:
    """The base runs in bf16 on GPUs only (on CPU it trains in fp32; the worker says so)."""
    return on_gpu and recipe.train.precision == "bf16"


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
    fsdp = uses_fsdp(recipe, world_size)  # on CPU accelerate quietly runs this as DDP
    return SFTConfig(
        output_dir=str(run_dir / CHECKPOINTS),
        # length and optimizer
        max_steps=steps,  # from max_steps or epochs (the step plan); the rows already repeat per epoch
        num_train_epochs=1,
        learning_rate=t.learning_rate,
        lr_scheduler_type=SCHEDULES[t.schedule],
        warmup_steps=t.warmup_steps,
        # fused on GPUs (TRL's default); the for-each kernel on CPU gives bit-identical sharded and unsharded runs
        optim="adamw_torch_fused" if on_gpu else "adamw_torch",
        weight_decay=t.weight_decay,
        adam_beta1=t.adam_beta1,
        adam_beta2=t.adam_beta2,
        adam_epsilon=t.adam_eps,
        max_grad_norm=t.max_grad_norm or 0.0,  # 0 = no clipping (the norm is still measured)
        per_device_train_batch_size=t.per_device_batch_size,
        gradient_accumulation_steps=accumulation(t, world_size),  # from the global batch: per GPU
        seed=t.seed,
        data_seed=t.seed,
        # precision and memory
        bf16=trains_in_bf16(recipe, on_gpu),
        fp16=False,
        use_cpu=not on_gpu,
        gradient_checkpointing=t.gradient_checkpointing and not fsdp,
        gradient_checkpointing_kwargs=gradient_checkpointing_kwargs(t.kernels),  # + TRL's `selective` key
        fsdp=fsdp,  # sharding and wrapping come from fsdp_config
        fsdp_config=fsdp_settings(recipe) if fsdp else None,
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
        logging_steps=t.log_every,
        logging_first_step=False,
        report_to="none",
        disable_tqdm=not progress,
        save_strategy="steps",
        save_steps=t.checkpoint_every,
        save_total_limit=t.keep_last,
        save_only_model=False,
        eval_strategy="no",
    )
