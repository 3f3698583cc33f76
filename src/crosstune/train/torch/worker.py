"""One torch training process: the whole run on one device, or one rank of a launched multi-device run (the
session holds the run directory's lock and settled the RunContext every rank receives).

`train_in_process(context)` builds the model (`model.build_model`), installs the shared initial LoRA, maps the recipe
onto TRL (`config.sft_config`) and trains with CrosstuneSFTTrainer (callbacks), which writes the shared metrics and
checkpoints atomically; the final adapter goes to <run>/adapter (PEFT's own save: collective under FSDP).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from crosstune.confinement import remove
from crosstune.data import torch_dataset
from crosstune.families import get_family
from crosstune.recipe import model_path
from crosstune.run.integrity import verify_saved
from crosstune.run.layout import ADAPTER, CHECKPOINTS, step_folders
from crosstune.train.backend import RunContext
from crosstune.train.torch.checkpoints import ADAPTER_STAGING, STAGING
from crosstune.train.torch.config import sft_config
from crosstune.train.torch.lora import install_initial_lora, lora_config
from crosstune.train.torch.model import build_model, loads_by_shard
from crosstune.train.torch.sharded_load import materialize_lora

console = Console(soft_wrap=True, highlight=False, markup=False)


def train_in_process(ctx: RunContext) -> int:
    """Train this process's part of the run; returns the optimizer step the final adapter (<run>/adapter) belongs
    to."""
    import torch
    from accelerate import PartialState

    from crosstune.train.torch.callbacks import CrosstuneSFTTrainer, StepMetricsCallback
    from crosstune.train.torch.kernels import kernel_trainer_class
    from crosstune.train.torch.layers import compile_decoder_layers, lora_input_casting

    recipe, run_dir = ctx.recipe, ctx.run_dir
    state = PartialState(cpu=not torch.cuda.is_available())  # as TrainingArguments will; a singleton
    resume_from = step_folders(run_dir)[ctx.resume_from] if ctx.resume_from else None
    if resume_from is not None and state.is_main_process:
        verify_saved(resume_from, "checkpoint", "resume")
    if state.is_main_process:
        _clear_staging(run_dir)
        if state.device.type != "cuda" and recipe.train.precision == "bf16":
            console.print("[precision] no GPU: training in fp32 (bf16 is for GPUs here)")
    state.wait_for_everyone()

    by_shard = loads_by_shard(recipe, state.num_processes, state.device.type)  # FSDP2: meta base, shards read
    model, tokenizer = build_model(recipe, on_gpu=state.device.type == "cuda", empty=by_shard)
    dataset = train_rows(ctx)
    args = sft_config(recipe, run_dir, ctx.plan.total_steps, world_size=state.num_processes, progress=ctx.progress)
    lora, layout = lora_config(recipe, model, ctx.spec)
    callback = StepMetricsCallback(ctx)
    trainer_cls = kernel_trainer_class(CrosstuneSFTTrainer, recipe.train.kernels)  # train.kernels (kernels.py)
    trainer = trainer_cls(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[callback],
        keep_last=recipe.train.keep_last,
        shard_source=model_path(recipe) if by_shard else None,
        bucket=ctx.bucket,
    )
    callback.bind(trainer)
    if by_shard:
        materialize_lora(trainer.model, state.device)  # PEFT put them on the meta device beside the meta base
    install_initial_lora(trainer.model, recipe, ctx.spec)  # a resumed run's checkpoint replaces it in train()
    kernels = recipe.train.kernels  # the decoder layers' fast paths (layers.py)
    if kernels.compile:
        compile_decoder_layers(trainer.model, get_family(recipe.model.family).hf_arch(ctx.spec).decoder_layer_class)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    if trainable != layout.params:  # run.json's lora.layout.params counts from the spec: it must be what trains
        raise RuntimeError(f"PEFT trains {trainable} parameters, the {recipe.model.family} spec counts {layout.params}")

    with lora_input_casting(trainer.model, kernels):
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    trainer.save_adapter(run_dir / ADAPTER)
    state.wait_for_everyone()
    return trainer.state.global_step


def train_rows(ctx: RunContext) -> Any:
    """The prepared rows in the shared order (`rank_order`: seeded shuffle per epoch, as many epochs as the steps
    need), padding removed, with labels and seq_lengths.

    Every rank gets the whole order and accelerate deals out batches round-robin, so optimizer step s trains on
    rows [s·G, (s+1)·G) of the order (G = the global batch): the rows the JAX backend's step s reads."""
    return torch_dataset(ctx.prepared, "train", seed=ctx.recipe.train.seed, epochs=ctx.plan.epochs_read)


def _clear_staging(run_dir: Path) -> None:
    """Drop half-written checkpoints and adapters (fixed names are safe: the run directory's lock is ours)."""
    remove(run_dir / CHECKPOINTS / STAGING)  # a link is unlinked, never followed (crosstune.confinement)
    remove(run_dir / ADAPTER_STAGING)
    run_dir.mkdir(parents=True, exist_ok=True)
