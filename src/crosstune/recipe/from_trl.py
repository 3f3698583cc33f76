"""`recipe import --from trl`: a `trl sft --config` file as a crosstune recipe. Every key is mapped, listed as not
mapped (why, and the nearest crosstune setting) or as ignored (logging and the like); a key the file leaves out
counts at TRL 1.16's default, which often differs from crosstune's (lr 2e-5, linear schedule, 3 epochs, batch 8,
max_length 1024, no packing, LoRA alpha 32 and dropout 0.05): TRL_DEFAULTS, checked against TRL by a test."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from crosstune.families.spec import EXPERTS_REFUSED
from crosstune.recipe.porting import (
    ImportRefused,
    Keys,
    Port,
    data_path,
    fit_batch,
    identify_model,
    peek_columns,
    qlora_line,
    resolve_targets,
    set_hardware,
    set_model,
)

TRL_DEFAULTS: dict[str, Any] = {
    "learning_rate": 2e-5, "lr_scheduler_type": "linear", "num_train_epochs": 3.0, "max_steps": -1,
    "warmup_steps": 0, "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8,
    "max_grad_norm": 1.0, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
    "gradient_checkpointing": True, "seed": 42, "logging_steps": 10, "save_steps": 500, "save_total_limit": None,
    "max_length": 1024, "packing": False, "packing_strategy": "bfd", "assistant_only_loss": False,
    "completion_only_loss": None, "optim": "adamw_torch_fused", "bf16": None, "fp16": False, "torch_compile": False,
    "use_peft": False, "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05, "lora_target_modules": None,
    "model_revision": "main", "dtype": "float32", "attn_implementation": None, "dataset_train_split": "train",
    "dataset_text_field": "text",
}  # fmt: skip
SCHEDULES = {"cosine": "cosine", "linear": "linear", "constant": "constant", "constant_with_warmup": "constant"}
ATTENTION = {None: "sdpa", "sdpa": "sdpa", "eager": "eager", "flex_attention": "flex"}
ADAMW = ("adamw_torch", "adamw_torch_fused", "adamw_hf")
DIRECT = {  # TRL key -> recipe key, same meaning
    "learning_rate": "train.learning_rate", "warmup_steps": "train.warmup_steps", "weight_decay": "train.weight_decay",
    "adam_beta1": "train.adam_beta1", "adam_beta2": "train.adam_beta2", "adam_epsilon": "train.adam_eps",
    "per_device_train_batch_size": "train.per_device_batch_size", "gradient_checkpointing":
    "train.gradient_checkpointing", "seed": "train.seed", "logging_steps": "train.log_every",
    "save_steps": "train.checkpoint_every", "lora_r": "lora.rank", "lora_dropout": "lora.dropout",
    "packing": "data.packing", "torch_compile": "train.kernels.compile",
}  # fmt: skip
IGNORED = {  # keys that change no trained number: why
    **dict.fromkeys(("output_dir", "run_name", "report_to", "logging_dir", "logging_strategy", "logging_first_step",
                     "disable_tqdm", "push_to_hub", "hub_model_id", "hub_strategy", "hub_private_repo", "hub_token"),
                    "where and how TRL logs and publishes; crosstune writes metrics.jsonl in the run directory"),
    **dict.fromkeys(("eval_strategy", "eval_steps", "per_device_eval_batch_size", "dataset_test_split",
                     "eval_on_start", "do_eval"), "evaluation during training; crosstune's eval stage scores pass@k"),
    **dict.fromkeys(("save_strategy", "save_only_model", "resume_from_checkpoint", "overwrite_output_dir"),
                    "checkpoint mechanics; crosstune checkpoints every train.checkpoint_every steps and resumes"),
    **dict.fromkeys(("padding_free", "dataloader_num_workers", "dataloader_pin_memory", "dataset_num_proc",
                     "dataloader_drop_last", "ddp_find_unused_parameters", "ddp_timeout", "use_cpu",
                     "gradient_checkpointing_kwargs", "data_seed", "shuffle_dataset", "dataset_streaming",
                     "average_tokens_across_devices", "include_num_input_tokens_seen", "remove_unused_columns"),
                    "how TRL feeds its workers; crosstune's torch leg sets these itself (padding-free, one seed)"),
    **dict.fromkeys(("bnb_4bit_quant_type", "use_bnb_nested_quant", "bnb_4bit_quant_storage"), "part of load_in_4bit"),
    **dict.fromkeys(("env", "trust_remote_code", "lora_task_type", "eos_token", "pad_token", "dataset_kwargs"),
                    "loader and tokenizer details the family's checkpoint settles"),
}  # fmt: skip


def import_trl(cfg: dict[str, Any], source: Path, hardware: str | None) -> Port:
    """The recipe a TRL config describes (Port.recipe) and what did not carry over."""
    port, take = Port(source, "trl"), Keys(cfg, TRL_DEFAULTS)
    if not take("use_peft"):
        raise ImportRefused(f"{source}: use_peft is false (a full fine-tune): crosstune trains LoRA; set use_peft: "
                            "true and the lora_* keys")  # fmt: skip
    name = take("model_name_or_path")
    if not isinstance(name, str):
        raise ImportRefused(f"{source}: model_name_or_path is missing: name the model (a hub id or a folder)")
    revision = take("model_revision")
    model = identify_model(name, None if revision == "main" else revision, source.parent, "model_name_or_path")
    set_model(port, model)
    _model_keys(port, take, model)
    _data(port, take, source)
    set_hardware(port, hardware, model)
    _training(port, take)
    fit_batch(port)
    take.rest(port, IGNORED)
    return port


def _model_keys(port: Port, take: Keys, model) -> None:
    dtype = take("dtype")
    if dtype in ("bfloat16", "float32"):
        port.set("model.dtype", dtype)
    else:
        port.set("model.dtype", "bfloat16")
        if dtype != "auto":
            port.miss("dtype", f"{dtype}: crosstune holds the base in bfloat16 or float32", "model.dtype bfloat16")
    attention = take("attn_implementation")
    if attention in ATTENTION:
        port.set("train.kernels.attention", ATTENTION[attention])
    else:
        port.miss("attn_implementation", f"{attention}: not a kernel crosstune's torch leg switches to",
                  "train.kernels.attention sdpa (flex: FlexAttention with document masks)")  # fmt: skip
        port.set("train.kernels.attention", "sdpa")
    if take("load_in_4bit"):
        qlora_line(port, "load_in_4bit", model)
    if take("load_in_8bit"):
        port.miss("load_in_8bit", "an 8-bit base (bitsandbytes LLM.int8)", "LoRA on a bf16 base")
    port.set("lora.rank", take("lora_r"))
    port.set("lora.dropout", float(take("lora_dropout")))
    alpha = take("lora_alpha")
    if take("use_rslora"):  # rsLoRA scales B·A by alpha/√r; crosstune by alpha/r: the same scale, rewritten
        r = take("lora_r")
        port.notes.append(f"use_rslora: scale alpha/√r = {alpha}/√{r}, written as lora.alpha {alpha * math.sqrt(r):g}")
        alpha = alpha * math.sqrt(r)
    port.set("lora.alpha", float(alpha))
    targets = take("lora_target_modules")
    if isinstance(targets, list) and len(targets) == 1:
        targets = targets[0]  # TRL's ModelConfig passes a one-item list on as one regex
    if targets is None:
        targets = ["q_proj", "v_proj"]  # PEFT's own default for Gemma when TRL passes none
        port.notes.append("lora_target_modules: none given, so PEFT's Gemma default q_proj, v_proj")
    resolve_targets(port, "lora_target_modules", targets, model)
    if take("lora_target_parameters"):
        port.miss("lora_target_parameters", EXPERTS_REFUSED, "lora.targets gate, up, down (the dense MLP)")
    for key, why in (("use_dora", "DoRA's magnitude vector"), ("lora_modules_to_save", "whole modules trained")):
        if take(key):
            port.miss(key, f"{why}: crosstune trains plain LoRA", "lora")


def _data(port: Port, take: Keys, source: Path) -> None:
    entries = take("datasets")
    if entries:
        found = [_mixture_entry(port, i, e, source.parent) for i, e in enumerate(entries)]
        if take("dataset_name"):
            port.ignore("dataset_name", "TRL reads `datasets` when both are given, and so does the import")
    elif take("dataset_name"):
        path, is_hub = data_path("dataset_name", take("dataset_name"), source.parent)
        src = {"path": path, **({"config": take("dataset_config")} if take("dataset_config") else {})}
        if is_hub and take("dataset_train_split") != "train":
            src["hub_split"] = take("dataset_train_split")
        found = [(src, is_hub)]
    else:
        raise ImportRefused(f"{source}: neither dataset_name nor datasets: name the training data")
    port.set("data.sources", [src for src, _ in found])
    columns = next((c for src, is_hub in found if (c := peek_columns(src["path"], is_hub)) is not None), None)
    if take("assistant_only_loss"):
        port.set("data.columns", {"preset": "messages"})
    elif columns is not None and "messages" in columns:
        port.set("data.columns", {"preset": "messages"})
        port.miss("assistant_only_loss", "false on a messages dataset: TRL trains every token, prompts included",
                  "crosstune's assistant-only loss (data.columns.preset messages)")  # fmt: skip
    elif columns is not None and "text" in columns and "prompt" not in columns:
        raise ImportRefused(f"{source}: the data is plain text ({take('dataset_text_field')}): crosstune trains "
                            "conversations (messages, or prompt/completion)")  # fmt: skip
    else:
        port.set("data.columns", {"preset": "prompt_completion"})
        if take("completion_only_loss") is False:
            port.miss("completion_only_loss", "false: TRL trains the prompts too", "crosstune's completion-only loss")
        if columns is None:
            port.notes.append("data.columns: the data is not at hand to look at: read as TRL's prompt/completion "
                              "columns (set preset messages for a messages column)")  # fmt: skip
    port.set("data.reasoning", "keep_inline")  # TRL trains the text as written
    max_length = take("max_length")
    if max_length is None:
        port.miss("max_length", "null: TRL trains every example whole", "data.max_seq_len (2048 here)")
    else:
        port.set("data.max_seq_len", max_length)
    port.set("data.truncation", "truncate")  # TRL keeps an over-long example's start
    port.set("data.packing", take("packing"))
    if take("packing") and take("packing_strategy") != "bfd":
        port.miss("packing_strategy", f"{take('packing_strategy')}: splits documents across rows",
                  "crosstune packs whole documents")  # fmt: skip


def _mixture_entry(port: Port, i: int, entry: Any, config_dir: Path) -> tuple[dict[str, Any], bool]:
    key = f"datasets[{i}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise ImportRefused(f"{key}: a dataset entry needs a path")
    if entry["path"] in ("json", "parquet") and entry.get("data_files"):
        files = entry["data_files"]
        if not isinstance(files, str):
            raise ImportRefused(f"{key}.data_files: one file or glob per entry (give each its own entry)")
        return {"path": data_path(f"{key}.data_files", files, config_dir)[0]}, False
    path, is_hub = data_path(f"{key}.path", entry["path"], config_dir)
    src: dict[str, Any] = {"path": path}
    if entry.get("name"):
        src["config"] = entry["name"]
    if is_hub and entry.get("split", "train") != "train":
        src["hub_split"] = entry["split"]
    for extra in ("data_dir", "columns", "fraction"):
        if entry.get(extra) is not None:
            port.miss(f"{key}.{extra}", "a selection crosstune's sources do not make", "data.sources, data.subsample")
    return src, is_hub


def _training(port: Port, take: Keys) -> None:
    for key in ("learning_rate", "warmup_steps", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
                "per_device_train_batch_size", "gradient_checkpointing", "seed", "logging_steps", "save_steps",
                "torch_compile"):  # fmt: skip
        port.set(DIRECT[key], take(key))
    port.set("train.max_grad_norm", take("max_grad_norm") or None)
    if take("save_total_limit"):
        port.set("train.keep_last", take("save_total_limit"))
    steps = take("max_steps")
    if steps and steps > 0:
        port.set("train.max_steps", steps)
        if "num_train_epochs" in take.given:
            take("num_train_epochs")
            port.ignore("num_train_epochs", "max_steps sets the run's length (it overrides epochs in TRL too)")
    else:
        port.set("train.epochs", float(take("num_train_epochs")))
    schedule = take("lr_scheduler_type")
    port.set("train.schedule", SCHEDULES.get(schedule, "cosine"))
    if schedule not in SCHEDULES:
        port.miss("lr_scheduler_type", f"{schedule}: not a schedule crosstune runs", "train.schedule cosine")
    ratio = take("warmup_ratio")
    if ratio:
        if steps and steps > 0:
            port.set("train.warmup_steps", math.ceil(steps * ratio))  # transformers' rule: ceil(total × ratio)
        else:
            port.miss("warmup_ratio", f"{ratio}: crosstune counts warm-up in steps and the run's steps are known "
                      "once the data is prepared", "train.warmup_steps (ratio × the steps `crosstune train` "
                      "reports)")  # fmt: skip
    gpus = port.get("backend.torch.devices", 1)  # the target's GPUs (--hardware), else one
    batch = take("per_device_train_batch_size") * take("gradient_accumulation_steps") * gpus
    port.set("train.global_batch_size", batch)
    port.notes.append(f"train.global_batch_size {batch}: per_device_train_batch_size × gradient_accumulation_steps "
                      f"× {gpus} GPU{'s' if gpus > 1 else ''} (rows per optimizer step)")  # fmt: skip
    bf16 = take("bf16")  # None: TRL turns bf16 on unless fp16 is
    port.set("train.precision", "fp32" if bf16 is False and not take("fp16") else "bf16")
    if take("fp16"):
        port.miss("fp16", "float16 autocast", "train.precision bf16")
    optim = take("optim")
    if optim not in ADAMW:
        port.miss("optim", f"{optim}: crosstune's optimizer is AdamW with fp32 state (both backends)", "AdamW")
    if take("use_liger_kernel"):
        port.miss("use_liger_kernel", "Liger's Triton kernels (fused linear cross-entropy, RMSNorm, RoPE, SwiGLU)",
                  "train.kernels.loss cce (the fused linear cross-entropy) and train.kernels.compile")  # fmt: skip
    if take("fsdp"):
        port.set("backend.torch.fsdp", True)
        fsdp = take("fsdp_config") or {}
        if isinstance(fsdp, dict) and fsdp.get("activation_checkpointing"):  # FSDP's own recompute
            port.set("train.gradient_checkpointing", True)
    for key, nearest in (("deepspeed", "backend.torch.fsdp"), ("tf32", "train.precision"),
                         ("lr_scheduler_kwargs", "train.schedule"), ("neftune_noise_alpha", "")):  # fmt: skip
        if take(key):
            port.miss(key, "no crosstune equivalent", nearest)
