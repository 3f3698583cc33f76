"""`recipe import --from axolotl`: an Axolotl YAML (its documented keys: docs/config-reference.qmd, datasets of
`type: chat_template`) as a crosstune recipe. Every key is mapped, listed as not mapped (why, and the nearest
crosstune setting) or as ignored (logging and the like); a key the file leaves out counts at Axolotl's default
(AXOLOTL_DEFAULTS: sequence_len 512, no packing, no recompute, LoRA dropout 0, warm-up min(3 % of the steps, 100))."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from crosstune.families import get_family
from crosstune.families.spec import EXPERTS_REFUSED
from crosstune.recipe.porting import (
    ImportRefused,
    Keys,
    Port,
    data_path,
    fit_batch,
    identify_model,
    qlora_line,
    resolve_targets,
    set_hardware,
    set_model,
)

AXOLOTL_DEFAULTS: dict[str, Any] = {
    "sequence_len": 512, "sample_packing": False, "micro_batch_size": 1, "gradient_accumulation_steps": 1,
    "num_epochs": 1.0, "lr_scheduler": "cosine", "optimizer": "adamw_torch_fused", "weight_decay": 0.0,
    "lora_dropout": 0.0, "train_on_inputs": False, "bf16": "auto", "gradient_checkpointing": False,
    "max_grad_norm": 1.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8, "seed": 42,
    "excess_length_strategy": "drop", "chat_template": "tokenizer_default",
}  # fmt: skip
SCHEDULES = {"cosine": "cosine", "linear": "linear", "constant": "constant", "constant_with_warmup": "constant"}
ADAMW = ("adamw_torch", "adamw_torch_fused", "adamw_hf")
ATTENTION = {"sdp_attention": "sdpa", "eager_attention": "eager", "flex_attention": "flex"}  # bool switches
ATTN_IMPLEMENTATION = {"sdpa": "sdpa", "eager": "eager", "flex_attention": "flex"}
CCE_PLUGIN = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"
KNOWN_TEMPLATES = {"gemma3": ("tokenizer_default", "gemma3", "gemma"), "gemma4": ("tokenizer_default", "gemma4")}
DIRECT = {
    "lora_r": "lora.rank", "lora_dropout": "lora.dropout", "sequence_len": "data.max_seq_len",
    "sample_packing": "data.packing", "micro_batch_size": "train.per_device_batch_size",
    "learning_rate": "train.learning_rate", "weight_decay": "train.weight_decay", "adam_beta1": "train.adam_beta1",
    "adam_beta2": "train.adam_beta2", "adam_epsilon": "train.adam_eps", "seed": "train.seed",
    "logging_steps": "train.log_every", "save_steps": "train.checkpoint_every", "save_total_limit": "train.keep_last",
    "torch_compile": "train.kernels.compile",
}  # fmt: skip
_LOGGING = ("output_dir", "hub_model_id", "hub_strategy", "push_dataset_to_hub", "use_tensorboard", "debug",
            "dataset_prepared_path", "dataset_processes", "strict", "save_first_step", "resume_from_checkpoint",
            "auto_resume_from_checkpoints", "local_rank", "saves_per_epoch", "save_strategy")  # fmt: skip
IGNORED = {
    **dict.fromkeys(_LOGGING, "where and how Axolotl logs, saves and publishes; crosstune writes its run directory"),
    **dict.fromkeys(("val_set_size", "test_datasets", "evals_per_epoch", "eval_steps", "eval_table_size",
                     "eval_max_new_tokens", "eval_batch_size", "eval_sample_packing", "early_stopping_patience",
                     "eval_strategy"), "evaluation during training; crosstune's eval stage scores pass@k"),
    **dict.fromkeys(("model_type", "tokenizer_type", "processor_type", "base_model_config", "tokenizer_config",
                     "trust_remote_code", "tokenizer_use_fast", "tokenizer_legacy", "freeze_mm_modules",
                     "unfrozen_parameters", "ddp_find_unused_parameters", "pad_to_sequence_len", "group_by_length",
                     "gradient_checkpointing_kwargs", "dataloader_num_workers", "dataloader_pin_memory",
                     "dataloader_prefetch_factor", "remove_unused_columns", "skip_prepare_dataset"),
                    "loader classes, padding and worker settings crosstune's legs settle themselves (LoRA freezes "
                    "the base; rows are packed or padding-free)"),
    "bnb_config_kwargs": "part of the 4-bit base (load_in_4bit, adapter qlora)",
}  # fmt: skip


def import_axolotl(cfg: dict[str, Any], source: Path, hardware: str | None) -> Port:
    """The recipe an Axolotl config describes (Port.recipe) and what did not carry over."""
    port, take = Port(source, "axolotl"), Keys(cfg, AXOLOTL_DEFAULTS)
    name = take("base_model")
    if not isinstance(name, str):
        raise ImportRefused(f"{source}: base_model is missing: name the model (a hub id or a folder)")
    model = identify_model(name, take("revision_of_model"), source.parent, "base_model")
    set_model(port, model)
    port.set("model.dtype", "bfloat16")
    adapter = take("adapter")
    if adapter not in ("lora", "qlora"):
        what = "a full fine-tune (no adapter)" if adapter is None else f"adapter {adapter!r}"
        raise ImportRefused(f"{source}: {what}: crosstune trains LoRA; set adapter: lora")
    if adapter == "qlora" or take("load_in_4bit"):
        qlora_line(port, "adapter: qlora" if adapter == "qlora" else "load_in_4bit", model)
        take("load_in_4bit")
    if take("load_in_8bit"):
        port.miss("load_in_8bit", "an 8-bit base (bitsandbytes LLM.int8)", "LoRA on a bf16 base")
    _lora(port, take, model)
    _data(port, take, source, model.family)
    set_hardware(port, hardware, model)
    _training(port, take)
    fit_batch(port)
    _kernels(port, take)
    take.rest(port, IGNORED)
    return port


def _lora(port: Port, take: Keys, model) -> None:
    if take("lora_r") is not None:
        port.set("lora.rank", take("lora_r"))
    port.set("lora.dropout", float(take("lora_dropout")))
    if take("lora_r") is None:
        port.set("lora.rank", 8)
        port.notes.append("lora.rank 8: no lora_r, so PEFT's default")
    alpha = take("lora_alpha") if take("lora_alpha") is not None else port.get("lora.rank")
    if take("peft_use_rslora"):  # rsLoRA scales B·A by alpha/√r; crosstune by alpha/r: the same scale, rewritten
        r = port.get("lora.rank")
        port.notes.append(f"peft_use_rslora: scale alpha/√r = {alpha}/√{r}, written as lora.alpha {alpha * r**0.5:g}")
        alpha = alpha * math.sqrt(r)
    port.set("lora.alpha", float(alpha))
    if take("lora_target_linear"):
        resolve_targets(port, "lora_target_linear", "all-linear", model)
        take("lora_target_modules")
    elif take("lora_target_modules") is not None:
        resolve_targets(port, "lora_target_modules", take("lora_target_modules"), model)
    else:
        port.notes.append("lora_target_modules: none given, so PEFT's Gemma default q_proj, v_proj")
        resolve_targets(port, "lora_target_modules", ["q_proj", "v_proj"], model)
    if take("lora_target_parameters"):
        port.miss("lora_target_parameters", EXPERTS_REFUSED, "lora.targets gate, up, down (the dense MLP)")
    for key, why in (
        ("peft_use_dora", "DoRA's magnitude vector"),
        ("lora_modules_to_save", "whole modules trained"),
        ("lora_model_dir", "starting from a saved adapter"),
        ("loraplus_lr_ratio", "LoRA+'s B rate"),
    ):
        if take(key):
            port.miss(key, f"{why}: crosstune trains plain LoRA from its own initial draw", "lora")


def _data(port: Port, take: Keys, source: Path, family: str) -> None:
    entries = take("datasets")
    if not isinstance(entries, list) or not entries:
        raise ImportRefused(f"{source}: no datasets: name the training data (type: chat_template)")
    sources, columns = [], None
    for i, entry in enumerate(entries):
        found = _dataset(port, f"datasets[{i}]", entry, source.parent)
        if found is None:
            continue
        src, cols = found
        if columns not in (None, cols):
            port.miss(f"datasets[{i}]", f"columns {cols} differ from datasets[0]'s {columns}: one mapping reads every "
                      "source", "a copy of the data in the first source's columns")  # fmt: skip
            continue
        sources.append(src)
        columns = cols
    if not sources:
        raise ImportRefused(f"{source}: no dataset crosstune can read: it reads conversations (type chat_template)")
    port.set("data.sources", sources)
    port.set("data.columns", columns)
    port.set("data.reasoning", "keep_inline")  # Axolotl trains the text as written
    template = take("chat_template")
    if template not in KNOWN_TEMPLATES[family] or take("chat_template_jinja"):
        port.miss("chat_template", f"{take('chat_template_jinja') and 'jinja' or template}: crosstune renders with the "
                  "model's own template (what is trained is what is served)", f"the {family} template")  # fmt: skip
    eot = take("eot_tokens")
    turn_end = get_family(family).chat.turn_end
    if eot is not None and list(eot) != [turn_end]:
        port.miss("eot_tokens", f"{eot}: crosstune trains each answer through {turn_end}", f"{turn_end}")
    if take("special_tokens") or take("tokens") or take("added_tokens_overrides"):
        for key in ("special_tokens", "tokens", "added_tokens_overrides"):
            if take(key):
                port.miss(key, "tokens added or renamed: crosstune trains the checkpoint's vocabulary", "")
    port.set("data.max_seq_len", take("sequence_len"))
    port.set("data.packing", bool(take("sample_packing")))
    strategy = take("excess_length_strategy")
    port.set("data.truncation", "truncate" if strategy == "truncate" else "drop")
    if strategy not in ("drop", "truncate"):
        port.miss("excess_length_strategy", f"{strategy}: crosstune drops or truncates", "data.truncation drop")
    if take("train_on_inputs"):
        port.miss("train_on_inputs", "true: Axolotl trains the prompts too", "crosstune's assistant-only loss")


def _dataset(port: Port, key: str, entry: Any, config_dir: Path) -> tuple[dict, dict] | None:
    """One `datasets` entry as a source and its column mapping (None: listed as not mapped)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise ImportRefused(f"{key}: a dataset entry needs a path")
    entry = {k: v for k, v in entry.items() if v is not None}
    kind = entry.pop("type", None)
    if kind != "chat_template":
        port.miss(f"{key}.type", f"{kind}: crosstune reads conversations (type chat_template)", "data.columns")
        return None
    files = entry.pop("data_files", None)
    path, is_hub = data_path(key, files if isinstance(files, str) else entry["path"], config_dir)
    entry.pop("path")
    src: dict[str, Any] = {"path": path}
    if entry.get("ds_type") in ("json", "parquet") and not is_hub:
        fmt = {"json": "jsonl", "parquet": "parquet"}[entry.pop("ds_type")]
        if {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}.get(Path(path).suffix) != fmt:
            src["format"] = fmt  # the suffix doesn't say it
    for theirs, ours in (("name", "config"), ("revision", "revision")):
        if theirs in entry:
            src[ours] = entry.pop(theirs)
    split = entry.pop("split", "train")
    if is_hub and split != "train":
        src["hub_split"] = split
    mapping = entry.pop("message_property_mappings", {}) or {}
    role = mapping.get("role", entry.pop("message_field_role", "role"))
    content = mapping.get("content", entry.pop("message_field_content", "content"))
    field = entry.pop("field_messages", "messages")
    columns = {"preset": "messages", **({"messages": field} if field != "messages" else {})}
    columns.update({"message_role": role} if role != "role" else {})
    columns.update({"message_content": content} if content != "content" else {})
    if set(mapping) - {"role", "content"}:
        port.miss(f"{key}.message_property_mappings", f"{sorted(set(mapping) - {'role', 'content'})}: crosstune "
                  "reads a message's role and content (and reasoning)", "message_role, message_content")  # fmt: skip
    trained = entry.pop("roles_to_train", ["assistant"])
    if sorted({"gpt": "assistant"}.get(r, r) for r in trained or []) != ["assistant"]:
        port.miss(f"{key}.roles_to_train", f"{trained}: crosstune trains the assistant's messages", "assistant")
    eos = entry.pop("train_on_eos", "turn")
    if eos != "turn":
        port.miss(f"{key}.train_on_eos", f"{eos}: crosstune trains each assistant turn's end marker", "turn")
    entry.pop("chat_template", None)  # the global chat_template's check covers it
    for rest in entry:
        port.miss(f"{key}.{rest}", "a dataset option crosstune's sources do not have", "data.sources")
    return src, columns


def _training(port: Port, take: Keys) -> None:
    for key in ("micro_batch_size", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "seed"):
        port.set(DIRECT[key], take(key))
    lr = take("learning_rate")
    if lr is None:
        raise ImportRefused(f"{port.source}: learning_rate is missing (Axolotl requires it)")
    port.set("train.learning_rate", float(lr))  # Axolotl also takes it as a string
    port.set("train.max_grad_norm", take("max_grad_norm") or None)
    for key in ("logging_steps", "save_steps", "save_total_limit"):
        if isinstance(take(key), int):
            port.set(DIRECT[key], take(key))
    steps, epochs = take("max_steps"), take("num_epochs")
    if steps:
        port.set("train.max_steps", steps)
        if "num_epochs" in take.given:
            port.ignore("num_epochs", "max_steps sets the run's length (it precedes num_epochs in Axolotl too)")
    else:
        port.set("train.epochs", float(epochs))
    schedule = take("lr_scheduler")
    port.set("train.schedule", SCHEDULES.get(schedule, "cosine"))
    if schedule not in SCHEDULES:
        port.miss("lr_scheduler", f"{schedule}: not a schedule crosstune runs", "train.schedule cosine")
    for key in ("cosine_min_lr_ratio", "cosine_constant_lr_ratio", "optim_args", "lr_groups"):
        if take(key) is not None:
            port.miss(key, "a schedule or optimizer refinement crosstune's AdamW does not take", "train")
    _warmup(port, take, steps)
    gpus = port.get("backend.torch.devices", 1)  # the target's GPUs (--hardware), else one
    batch = take("micro_batch_size") * take("gradient_accumulation_steps") * gpus
    port.set("train.global_batch_size", batch)
    port.notes.append(f"train.global_batch_size {batch}: micro_batch_size × gradient_accumulation_steps × {gpus} "
                      f"GPU{'s' if gpus > 1 else ''} (rows per optimizer step)")  # fmt: skip
    if take("batch_size"):
        port.miss("batch_size", "Axolotl's total batch: crosstune derives it", "train.global_batch_size")
    bf16 = take("bf16")
    port.set("train.precision", "fp32" if bf16 is False and not take("fp16") else "bf16")
    if take("fp16"):
        port.miss("fp16", "float16 autocast", "train.precision bf16")
    if take("optimizer") not in ADAMW:
        port.miss("optimizer", f"{take('optimizer')}: crosstune's optimizer is AdamW with fp32 state (both backends)",
                  "AdamW (train.adam_*)")  # fmt: skip
    recompute = take("gradient_checkpointing")
    port.set("train.gradient_checkpointing", bool(recompute))
    if isinstance(recompute, str) or take("activation_offloading"):
        key = "activation_offloading" if take("activation_offloading") else "gradient_checkpointing"
        port.miss(key, "activations offloaded to host memory", "train.gradient_checkpointing (recompute)")
    if any([take("fsdp"), take("fsdp_config"), take("fsdp_version")]):
        port.set("backend.torch.fsdp", True)
    if take("tf32"):
        port.miss("tf32", "TF32 matmuls for the fp32 ops of a GPU run", "train.precision (bf16 matmuls)")
    for key in ("deepspeed", "sequence_parallel_degree", "context_parallel_size", "tensor_parallel_size"):
        if take(key):
            port.miss(key, "a parallelism crosstune's torch leg does not run", "backend.torch.fsdp (FSDP2)")


def _warmup(port: Port, take: Keys, steps: int | None) -> None:
    """Axolotl's warm-up: warmup_steps, else int(warmup_ratio × steps), else min(int(3 % of the steps), 100); a
    warm-up of 1 step becomes 2."""
    given, ratio = take("warmup_steps"), take("warmup_ratio")
    if given is not None:
        port.set("train.warmup_steps", 2 if given == 1 else given)
        return
    if steps:
        n = int(ratio * steps) if ratio is not None else min(int(0.03 * steps), 100)
        port.set("train.warmup_steps", 2 if n == 1 else n)
        return
    what = (
        f"warmup_ratio {ratio}" if ratio is not None else "no warm-up key: Axolotl warms up min(3 % of the steps, 100)"
    )
    port.miss("warmup_ratio" if ratio is not None else "warmup_steps", f"{what}; crosstune counts warm-up in steps, "
              "known once the data is prepared", "train.warmup_steps (the ratio × the steps `crosstune train` "
              "reports)")  # fmt: skip


def _kernels(port: Port, take: Keys) -> None:
    attention = take("attn_implementation")
    switches = [name for name in ("flash_attention", *ATTENTION, "xformers_attention") if take(name)]
    chosen = ATTN_IMPLEMENTATION.get(attention) if attention else ATTENTION.get(switches[0]) if switches else "sdpa"
    port.set("train.kernels.attention", chosen or "sdpa")
    if chosen is None:
        key = "attn_implementation" if attention else switches[0]
        port.miss(key, f"{attention or key}: not a kernel crosstune's torch leg switches to",
                  "train.kernels.attention sdpa (flex: FlexAttention with document masks)")  # fmt: skip
    if take("gemma4_hybrid_attn_impl"):
        port.miss("gemma4_hybrid_attn_impl", "flash-attention on sliding layers, SDPA on global ones",
                  "train.kernels.attention")  # fmt: skip
    if take("torch_compile"):
        port.set("train.kernels.compile", True)
    plugins = take("plugins") or []
    cce = take("cut_cross_entropy")  # read even when the plugin already says it
    if CCE_PLUGIN in plugins or cce:
        port.set("train.kernels.loss", "cce")
        port.set("train.kernels.token_metrics", False)  # the fused loss gives no per-token entropy or accuracy
    for plugin in plugins:
        if plugin != CCE_PLUGIN and "liger" not in plugin.lower():
            port.miss(f"plugins: {plugin}", "an Axolotl integration crosstune does not run", "train.kernels")
    liger = sorted(k for k in take.given if k.startswith("liger_") and take(k))
    if liger:
        port.miss(", ".join(liger), "Liger's Triton kernels (norms, RoPE, GLU, fused linear cross-entropy)",
                  "train.kernels.compile (torch.compile fuses norms, RoPE and GLU); train.kernels.loss cce for the "
                  "fused loss")  # fmt: skip
    for key in ("lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel", "fused_attn_kernel", "use_kernels",
                "use_scattermoe", "experts_implementation", "quantize_moe_experts"):  # fmt: skip
        if take(key):
            port.miss(key, "an Axolotl kernel of its own", "train.kernels.compile")
