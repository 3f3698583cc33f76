"""The training settings of an imported config: the run's length, schedule, warm-up, clipping, precision, optimizer,
recompute and sharding. `trainer_settings` reads transformers' TrainingArguments keys (TRL's and LLaMA-Factory's
configs are those); the helpers under it take key names, so Axolotl's importer states its own."""

from __future__ import annotations

from typing import Any

from crosstune.recipe.porting.port import Keys, Port
from crosstune.recipe.porting.target import Batch, ImportOptions, set_batch
from crosstune.recipe.training_arguments import ADAMW, NO_WARMUP_SCHEDULE, schedule_of


def set_length(port: Port, take: Keys, steps_key: str, epochs_key: str) -> int | None:
    """train.max_steps when the config gives a positive one (it overrides the epochs in every tool), else
    train.epochs; returns the steps when known."""
    steps = take(steps_key)
    if steps is not None and steps > 0:
        port.set("train.max_steps", steps)
        if take.has(epochs_key):
            take(epochs_key)
            port.ignore(epochs_key, f"{steps_key} sets the run's length (it overrides the epochs in the tool too)")
        return steps
    port.set("train.epochs", float(take(epochs_key)))
    return None


def set_schedule(port: Port, take: Keys, key: str) -> Any:
    """train.schedule from transformers' scheduler name at `key` (Axolotl and LLaMA-Factory use the same names)."""
    name = take(key)
    schedule = schedule_of(name)
    port.set("train.schedule", schedule or "cosine")
    if schedule is None:
        port.miss(key, f"{name}: not a schedule crosstune runs", "train.schedule cosine")
    return name


def set_warmup(
    port: Port, take: Keys, schedule: Any, *, steps_key: str = "warmup_steps", ratio_key: str = "warmup_ratio"
) -> None:
    """transformers' warm-up: warmup_ratio (it wins over warmup_steps in transformers 5), else warmup_steps, which
    below 1 is itself a fraction of the steps. transformers' `constant` schedule warms up not at all."""
    steps, ratio = take(steps_key), take(ratio_key)
    if schedule == NO_WARMUP_SCHEDULE:
        if ratio or steps:
            port.notes.append(
                f"train.warmup_steps 0: {NO_WARMUP_SCHEDULE} is transformers' schedule without a "
                f"warm-up, so the file's {ratio_key if ratio else steps_key} is not applied by its tool "
                "either"
            )
        port.set("train.warmup_steps", 0)
        return
    if ratio is not None and take.has(ratio_key):
        port.set("train.warmup_ratio", ratio)
        if take.has(steps_key) and steps:
            port.notes.append(
                f"train.warmup_ratio {ratio:g}: {ratio_key} wins over {steps_key} {steps:g} (transformers 5's rule)"
            )
    elif steps is not None and 0 < steps < 1:
        port.set("train.warmup_ratio", steps)  # transformers 5: a float below 1 is a fraction of the steps
    else:
        port.set("train.warmup_steps", int(steps or 0))
        if steps is not None and steps != int(steps):
            port.miss(steps_key, f"{steps:g}: a whole number of steps or a fraction below 1", f"{int(steps)} steps")


def set_every(port: Port, take: Keys, key: str, path: str) -> None:
    """A logging or checkpoint interval: whole steps carry; a fraction of the run (transformers' below-1 form)
    doesn't."""
    value = take(key)
    if value is None:
        return
    if value >= 1 and float(value).is_integer():
        port.set(path, int(value))
    else:
        port.miss(key, f"{value:g}: a fraction of the run's steps; crosstune counts whole steps", path)


def set_held_out(port: Port, take: Keys, key: str, tool: str) -> None:
    """A held-out split (a fraction of the rows, or a count) the tool evaluates on and never trains."""
    size = take(key)
    if size:
        held = f"{size:.0%} of the rows" if size < 1 else f"{size:g} rows"
        port.miss(
            key,
            f"a held-out split: {tool} trains on the rest of the data, {held} set aside for its "
            "evaluation; crosstune trains on every row",
            "data.subsample (a smaller training set)",
        )


def trainer_batch(port: Port, take: Keys, options: ImportOptions, devices: tuple[int | None, str]) -> None:
    """train.global_batch_size from TrainingArguments' batch keys and the devices the config names."""
    batch = Batch(
        take("per_device_train_batch_size"),
        "per_device_train_batch_size",
        take("gradient_accumulation_steps"),
        "gradient_accumulation_steps",
        *devices,
    )
    set_batch(port, batch, options)


def set_adamw(port: Port, take: Keys, key: str) -> None:
    name = take(key)
    if name not in ADAMW:
        port.miss(
            key, f"{name}: crosstune's optimizer is AdamW with fp32 state (both backends)", "AdamW (train.adam_*)"
        )


def set_fsdp_recompute(port: Port, take: Keys, recompute: bool) -> None:
    """train.gradient_checkpointing from the config's switch or FSDP's own recompute (fsdp_config's
    activation_checkpointing, which replaces the switch under FSDP); FSDP's parameter offload is named."""
    fsdp = take("fsdp_config") or {}
    port.set("train.gradient_checkpointing", bool(recompute or fsdp.get("activation_checkpointing")))
    if fsdp.get("activation_checkpointing") and not recompute:
        port.notes.append(
            "train.gradient_checkpointing true: fsdp_config.activation_checkpointing recomputes each "
            "decoder layer (FSDP's own recompute)"
        )
    for key in ("offload_params", "cpu_offload"):
        if fsdp.get(key):
            port.miss(
                f"fsdp_config.{key}",
                "parameters offloaded to host memory between uses",
                "backend.torch.fsdp (sharded over the GPUs, kept on them)",
            )


def trainer_settings(port: Port, take: Keys, recompute: bool) -> None:
    """Every TrainingArguments key of a TRL or LLaMA-Factory config (their direct rows are set by Keys.direct);
    `recompute`: whether the tool recomputes activations (its own switch, which differs between the two)."""
    set_length(port, take, "max_steps", "num_train_epochs")
    set_warmup(port, take, set_schedule(port, take, "lr_scheduler_type"))
    port.set("train.max_grad_norm", take("max_grad_norm") or None)
    set_every(port, take, "logging_steps", "train.log_every")
    set_every(port, take, "save_steps", "train.checkpoint_every")
    set_adamw(port, take, "optim")
    port.set("train.kernels.compile", take("torch_compile"))
    if take("fsdp"):
        port.set("backend.torch.fsdp", True)
    set_fsdp_recompute(port, take, recompute)
    if take("fp16"):
        port.miss("fp16", "float16 autocast", "train.precision bf16")
    if take("use_liger_kernel"):
        port.miss(
            "use_liger_kernel",
            "Liger's Triton kernels (fused linear cross-entropy, RMSNorm, RoPE, SwiGLU)",
            "train.kernels.loss cce (the fused linear cross-entropy) and train.kernels.compile",
        )
    for key, nearest in (
        ("deepspeed", "backend.torch.fsdp"),
        ("tf32", "train.precision"),
        ("lr_scheduler_kwargs", "train.schedule"),
        ("neftune_noise_alpha", ""),
    ):
        if take(key):
            port.miss(key, "no crosstune equivalent", nearest)
