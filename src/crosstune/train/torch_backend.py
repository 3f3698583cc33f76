"""The PyTorch backend: TRL SFTTrainer + PEFT LoRA (+ FSDP2 through accelerate) on the prepared dataset.

Setup -> train -> save, top to bottom:
1. `train()` runs in this process (one device) or launches `devices × nodes` workers (crosstune.train.torch_launch).
2. `build_model()` loads the HF checkpoint and `lora_config()` targets the recipe's neutral targets through the
   family's regex (language model only: a multimodal checkpoint's vision tower is left alone).
3. `sft_config()` maps the recipe onto SFTConfig, setting every TRL default that differs from the recipe.
4. `CrosstuneSFTTrainer` (torch_callbacks) trains padding-free on pre-tokenized rows, writes the shared metrics,
   checkpoints atomically; the final adapter goes to <run>/adapter, the loss curve to <run>/loss.png.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

from rich.console import Console

from crosstune.errors import BATCH_HINT, BatchPlanError
from crosstune.families import get_family
from crosstune.families.base import HF_TARGET_MODULES
from crosstune.recipe import Recipe, resolve_path
from crosstune.train.backend import TrainResult

console = Console(soft_wrap=True, highlight=False, markup=False)

SCHEDULES = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}
CHECKPOINTS = "checkpoints"
ADAPTER = "adapter"


# --- entry point ------------------------------------------------------------------------------------------------
def train(
    recipe: Recipe,
    run_dir: Path,
    *,
    resume: bool = False,
    progress: bool = True,
    node_rank: int = 0,
    main_address: str | None = None,
) -> TrainResult:
    """Train LoRA per `recipe` into `run_dir`. One device trains in this process; `backend.torch.devices × nodes`
    > 1 launches that many workers (accelerate with FSDP2 on GPUs; torchrun + gloo on CPU, where it is DDP)."""
    from crosstune.train.rundir import claim_run_dir
    from crosstune.train.torch_launch import launch_workers

    tb = recipe.backend.torch
    with claim_run_dir(run_dir, recipe, "torch", resume=resume, lead=node_rank == 0) as run_dir:
        if tb.devices * tb.nodes > 1:
            return launch_workers(recipe, run_dir, resume=resume, node_rank=node_rank, main_address=main_address)
        return train_in_process(recipe, run_dir, resume=resume, progress=progress)


def train_in_process(recipe: Recipe, run_dir: Path, *, resume: bool = False, progress: bool = True) -> TrainResult:
    """One training process (the whole run on one device, or one rank of a launched multi-device run; `train` or
    the launcher holds the run directory's lock)."""
    import torch
    from accelerate import PartialState

    from crosstune.data.prepare import data_provenance, lenient_note
    from crosstune.train.integrity import verify_checksums
    from crosstune.train.metrics import read_metrics
    from crosstune.train.plot import plot_loss_curve
    from crosstune.train.resume import nothing_to_resume
    from crosstune.train.torch_callbacks import (
        CrosstuneSFTTrainer,
        StepMetricsCallback,
        checkpoint_step,
        latest_checkpoint,
    )
    from crosstune.train.torch_kernels import kernel_trainer_class

    run_dir = Path(run_dir).resolve()
    state = PartialState(cpu=not torch.cuda.is_available())  # as TrainingArguments will; a singleton
    ckpt_dir = run_dir / CHECKPOINTS
    resume_from = latest_checkpoint(ckpt_dir) if resume else None
    if resume_from is not None and not verify_checksums(resume_from, "checkpoint") and state.is_main_process:
        console.print(f"[resume] {resume_from} has no recorded checksums (an older crosstune): not verified")
    if state.is_main_process:
        _prepare_run_dir(run_dir, resume, resume_from)
        if state.device.type != "cuda" and recipe.train.precision == "bf16":
            console.print("[precision] no GPU: training in fp32 (bf16 is for GPUs here)")
    state.wait_for_everyone()

    model, tokenizer = build_model(recipe, on_gpu=state.device.type == "cuda")
    dataset, steps, micro_batches_per_epoch, prepared = load_train_dataset(recipe, tokenizer, state.num_processes)
    if resume_from is not None and checkpoint_step(resume_from) >= steps:
        raise nothing_to_resume(run_dir, checkpoint_step(resume_from), steps)
    data = data_provenance(prepared)
    if state.is_main_process and (note := lenient_note(data)):
        console.print(note)
    args = sft_config(recipe, run_dir, steps, world_size=state.num_processes, progress=progress)
    lora, lora_meta = lora_config(recipe, model)
    callback = StepMetricsCallback(
        recipe, run_dir, model.config, micro_batches_per_epoch=micro_batches_per_epoch, progress=progress
    )
    trainer_cls = kernel_trainer_class(CrosstuneSFTTrainer, recipe.train.kernels)  # train.kernels (torch_kernels)
    trainer = trainer_cls(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[callback],
        keep_last=recipe.train.keep_last,
    )
    callback.bind(trainer)
    install_initial_lora(trainer.model, recipe)  # a resumed run's checkpoint replaces it in trainer.train()
    lora_meta["trainable_params"] = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    if state.is_main_process:
        _write_metadata(recipe, run_dir, trainer, lora_meta, resume_from, data)

    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    trainer.save_adapter(run_dir / ADAPTER)
    if state.is_main_process:
        _record_steps(run_dir, trainer.state.global_step)
        plot_loss_curve(run_dir)
    state.wait_for_everyone()
    losses = [row["loss"] for row in read_metrics(run_dir)]
    return TrainResult(
        run_dir=run_dir,
        steps=trainer.state.global_step,
        final_loss=losses[-1] if losses else float("nan"),
        losses=losses,
        adapter_dir=run_dir / ADAPTER,
    )


def _prepare_run_dir(run_dir: Path, resume: bool, resume_from: Path | None) -> None:
    """Refuse to start a fresh run over an earlier one; on a restart from step 0 drop the void metrics; drop
    half-written checkpoints."""
    from crosstune.train.torch_callbacks import ADAPTER_STAGING, STAGING

    ckpts = run_dir / CHECKPOINTS
    if not resume and ((ckpts.is_dir() and any(ckpts.glob("checkpoint-*"))) or (run_dir / "metrics.jsonl").exists()):
        raise FileExistsError(
            f"{run_dir} holds an earlier run: pass --resume to continue it, or choose another --run-dir"
        )
    if resume and resume_from is None:
        console.print(f"[resume] no complete checkpoint in {ckpts}: starting from step 0")
    if resume_from is None:
        (run_dir / "metrics.jsonl").unlink(missing_ok=True)
        shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)
    shutil.rmtree(ckpts / STAGING, ignore_errors=True)  # fixed names are safe: the run directory's lock is ours
    shutil.rmtree(run_dir / ADAPTER_STAGING, ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)


def _write_metadata(
    recipe: Recipe, run_dir: Path, trainer: Any, lora_meta: dict, resume_from: Path | None, data: dict
) -> None:
    from crosstune.train.rundir import write_run_metadata
    from crosstune.train.torch_callbacks import recomputes_activations

    args = trainer.args
    write_run_metadata(
        run_dir,
        recipe,
        "torch",
        model_class=type(trainer.model.get_base_model()).__name__,
        world_size=args.world_size,
        precision="bf16" if args.bf16 else "fp32",
        fsdp=bool(args.fsdp),
        gradient_checkpointing=recomputes_activations(args),
        resumed_from=str(resume_from) if resume_from else None,
        lora_layout=lora_meta,
        data=data,
    )


def _record_steps(run_dir: Path, steps: int) -> None:
    """run.json's `steps`: the optimizer step the final adapter belongs to (export reads it)."""
    from crosstune.train.rundir import atomic_write_text, read_run_metadata

    meta = read_run_metadata(run_dir)
    meta["steps"] = steps
    atomic_write_text(run_dir / "run.json", json.dumps(meta, indent=2))


# --- data -------------------------------------------------------------------------------------------------------
def load_train_dataset(recipe: Recipe, tokenizer: Any, world_size: int) -> tuple[Any, int, int, Any]:
    """(rows, optimizer steps, micro-batches per epoch, the PreparedDataset): the prepared rows in the shared order
    (`rank_order`: seeded shuffle per epoch, as many epochs as the steps need), padding removed, with labels and
    seq_lengths.

    Every rank gets the whole order and accelerate deals out batches round-robin, so optimizer step s trains on
    rows [s·G, (s+1)·G) of the order (G = the global batch): the rows the JAX backend's step s reads. Steps and
    epochs are counted as the JAX backend counts them (crosstune.train.jax_data.data_plan)."""
    from crosstune.data import torch_dataset, training_data

    t = recipe.train
    prepared = training_data(recipe, tokenizer, may_prepare=world_size == 1)  # the jax backend's rule too
    n_rows = len(prepared.split("train"))
    per_epoch = n_rows // (t.per_device_batch_size * world_size)  # micro-batches
    if per_epoch == 0:
        raise BatchPlanError(
            f"{n_rows} rows can't fill one micro-batch of {world_size} × {t.per_device_batch_size} rows: {BATCH_HINT}"
        )
    steps = t.max_steps or int((t.epochs or 1.0) * per_epoch) // t.grad_accumulation
    if steps == 0:
        raise BatchPlanError(f"{n_rows} rows give no whole optimizer step: {BATCH_HINT}")
    epochs = max(1, math.ceil(steps * t.grad_accumulation / per_epoch))
    return torch_dataset(prepared, "train", seed=t.seed, epochs=epochs), steps, per_epoch, prepared


# --- model + LoRA -----------------------------------------------------------------------------------------------
def build_model(recipe: Recipe, *, on_gpu: bool) -> tuple[Any, Any]:
    """The base model (recipe dtype on GPU, fp32 on CPU) and its tokenizer, from `recipe.model.path`."""
    import torch
    from transformers import AutoTokenizer

    from crosstune.train.torch_kernels import load_causal_lm

    path = resolve_path(recipe, recipe.model.path)
    if path is None or not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path: no HF checkpoint (config.json) at {path}")
    dtype = getattr(torch, recipe.model.dtype) if on_gpu else torch.float32
    model = load_causal_lm(recipe, path, dtype, on_gpu=on_gpu)  # train.kernels.attention, model.random_init
    model.config.use_cache = False  # packed rows need per-document masks, which transformers skips with a cache
    return model, AutoTokenizer.from_pretrained(path)


def lora_config(recipe: Recipe, model: Any) -> tuple[Any, dict]:
    """PEFT LoraConfig for the recipe's neutral targets and the layout it will produce (for the log and run.json).

    Gemma 4 global layers reuse keys as values (k_eq_v) and have no v_proj: a `v` target adapts the sliding
    layers only. The layout comes from the model's own modules and is checked against the family's spec."""
    from peft import LoraConfig

    family = get_family(recipe.model.family)
    targets = list(recipe.lora.targets)
    regex = family.peft_target_regex(targets)
    found: dict[int, set[str]] = {}
    pattern = re.compile(regex)
    leaf_to_target = {v: k for k, v in HF_TARGET_MODULES.items()}
    for name, _ in model.named_modules():
        if pattern.match(name):
            layer, leaf = re.search(r"layers\.(\d+)\.(.+)$", name).groups()
            found.setdefault(int(layer), set()).add(leaf_to_target[leaf])
    spec = family.spec_from_hf_config(model.config.to_dict())
    expected = {i: set(spec.targets_present(i, targets)) for i in range(spec.num_layers)}
    if found != expected:
        raise RuntimeError(f"LoRA targets differ from the {family.name} spec: modules {found} vs spec {expected}")
    by_kind: dict[str, list[str]] = {}
    for i, kind in enumerate(spec.layer_types):
        by_kind.setdefault(kind, [t for t in targets if t in expected[i]])
    skipped = {t: [i for i in range(spec.num_layers) if t not in expected[i]] for t in targets}
    skipped = {t: layers for t, layers in skipped.items() if layers}
    notes = [
        f"{t} adapts {len(spec.layer_types) - len(layers)} of {spec.num_layers} layers: layers {layers} "
        f"({', '.join(sorted({spec.layer_types[i] for i in layers}))}) have no {HF_TARGET_MODULES[t]} "
        "(k_eq_v: keys are reused as values)"
        for t, layers in skipped.items()
    ]
    if int(os.environ.get("RANK", "0")) == 0:
        adapted = sum(len(v) for v in expected.values())
        console.print(f"[lora] r={recipe.lora.rank} alpha={recipe.lora.alpha} on {adapted} modules: {by_kind}")
        for note in notes:
            console.print(f"[lora] {note}")
    config = LoraConfig(
        r=recipe.lora.rank,
        lora_alpha=recipe.lora.alpha,
        lora_dropout=recipe.lora.dropout,
        target_modules=regex,
        bias="none",
        task_type="CAUSAL_LM",
    )
    meta = {
        "target_regex": regex,
        "modules": sum(len(v) for v in expected.values()),
        "targets_by_layer_type": by_kind,
        "skipped_layers": skipped,
        "notes": notes,
    }
    return config, meta


def peft_lora_params(model: Any) -> dict[tuple[str, str], Any]:
    """{(HF module name in the text-only layout, "A" | "B"): the PEFT parameter} of a PEFT-wrapped model."""
    from crosstune.export.lora import text_module_name

    params = {}
    for name, p in model.named_parameters():
        if ".lora_A." in name or ".lora_B." in name:
            module, part = name.split(".lora_")
            params[(text_module_name(module.removeprefix("base_model.model.")), part[0])] = p
    return params


def install_lora_weights(model: Any, lora: Any) -> None:
    """Copy `lora` (crosstune.export.lora.LoraWeights) into the PEFT model's lora_A/lora_B, which must cover exactly
    the same modules."""
    import torch

    params = peft_lora_params(model)
    wanted = {(m, part) for m in lora.modules for part in "AB"}
    if set(params) != wanted:
        raise RuntimeError(
            "the PEFT model's LoRA modules differ from the LoRA to install: model only "
            f"{sorted(set(params) - wanted)[:3]}, LoRA only {sorted(wanted - set(params))[:3]} (family layout mismatch)"
        )
    with torch.no_grad():
        for (module, part), p in params.items():
            p.copy_(torch.from_numpy(lora.modules[module][0 if part == "A" else 1]))


def install_initial_lora(model: Any, recipe: Recipe) -> None:
    """The run's initial LoRA from crosstune.train.lora_init (the JAX backend installs the same arrays), in place of
    PEFT's own draw: the two backends start bit for bit from the same adapter."""
    from crosstune.train.lora_init import initial_lora

    spec = get_family(recipe.model.family).spec_from_hf_config(model.get_base_model().config.to_dict())
    lora = recipe.lora
    install_lora_weights(model, initial_lora(spec, lora.rank, lora.alpha, lora.targets, recipe.train.seed))


# --- SFTConfig --------------------------------------------------------------------------------------------------
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
        # Every rank reads the checkpoint to host RAM. accelerate 1.15's rank-0-only loading assumes every state-dict
        # entry becomes a sharded DTensor and fails on Gemma 4's persistent `layer_scalar` buffers.
        "cpu_ram_efficient_loading": False,
    }


def sft_config(recipe: Recipe, run_dir: Path, steps: int, *, world_size: int = 1, progress: bool = True) -> Any:
    """SFTConfig from the recipe. Every TRL/Trainer default that differs from the recipe is set here explicitly
    (TRL 1.16: gradient_checkpointing=True, bf16=True, lr 2e-5, logging every 10 steps, linear schedule, ...)."""
    import torch
    from trl import SFTConfig

    t = recipe.train
    on_gpu = torch.cuda.is_available()
    fsdp = recipe.backend.torch.fsdp and world_size > 1  # on CPU accelerate quietly runs this as DDP
    return SFTConfig(
        output_dir=str(run_dir / CHECKPOINTS),
        # length and optimizer
        max_steps=steps,  # from max_steps or epochs (load_train_dataset); the rows already repeat per epoch
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
        gradient_accumulation_steps=t.grad_accumulation,
        seed=t.seed,
        data_seed=t.seed,
        # precision and memory
        bf16=on_gpu and t.precision == "bf16",
        fp16=False,
        use_cpu=not on_gpu,
        gradient_checkpointing=t.gradient_checkpointing and not fsdp,
        gradient_checkpointing_kwargs={"use_reentrant": False},
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
