"""The recipe as TRL's settings: the TrainingArguments the torch backend trains with (crosstune.train.torch.config
adds what only a pre-tokenized in-process run needs) and `recipe export --to trl`, a config for `trl sft --config`
that trains the torch leg with TRL's own CLI (data, model and LoRA keys besides). TRL 1.16's key names: SFTConfig,
ModelConfig, ScriptArguments and DatasetMixtureConfig of trl/scripts/sft.py.

What a TRL config can't say is listed, one line each (`Unmapped`); what TRL does differently by construction even
then (its loss mask, packing, shuffling) is in docs/BACKEND_EQUIVALENCE.md, "crosstune's torch leg and TRL's CLI"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crosstune.families import get_family, model_dir_spec
from crosstune.recipe.hub_ids import hub_dataset_id
from crosstune.recipe.load import model_path
from crosstune.recipe.porting import Unmapped, model_ref
from crosstune.recipe.schema import Recipe

SCHEDULES = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}  # recipe -> TRL's name
ATTENTION = {"sdpa": "sdpa", "eager": "eager", "flex": "flex_attention"}  # train.kernels.attention -> transformers'
TABLE_BUILDERS = {"jsonl": "json", "parquet": "parquet"}  # a local file's `datasets` builder


def fsdp_settings(recipe: Recipe) -> dict[str, Any]:
    """FSDP2 settings (TrainingArguments.fsdp_config keys): the family's decoder layer is the sharding unit; under
    FSDP, activation checkpointing belongs here rather than in `gradient_checkpointing`."""
    return {
        "version": 2,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "transformer_layer_cls_to_wrap": [decoder_layer_class(recipe)],
        "reshard_after_forward": True,
        "state_dict_type": "FULL_STATE_DICT",  # LoRA weights and their optimizer state are small
        "activation_checkpointing": recipe.train.gradient_checkpointing,
        # Off: accelerate 1.15's rank-0 loading gives rank 0 the whole model and fails on Gemma 4's persistent
        # `layer_scalar` buffers. Each rank reads only its own shard instead (sharded_load.py, after fully_shard).
        "cpu_ram_efficient_loading": False,
    }


def decoder_layer_class(recipe: Recipe) -> str:
    """The checkpoint's decoder layer class (its config.json's architecture; without one at hand, the named size's):
    accelerate refuses a class name the model lacks, and the 12B's (gemma4_unified) differs from Gemma 4's."""
    family = get_family(recipe.model.family)
    folder = model_path(recipe, fetch=False) if recipe.model.path else None
    if folder is not None and (folder / "config.json").is_file():
        spec = model_dir_spec(folder, family.name)
    else:
        spec = family.sizes.get(recipe.model.size or "")
    return family.hf_arch(spec).decoder_layer_class


def uses_fsdp(recipe: Recipe, world_size: int) -> bool:
    """FSDP2 is asked for and there is more than one device to shard over."""
    return recipe.backend.torch.fsdp and world_size > 1


def trains_in_bf16(recipe: Recipe, on_gpu: bool) -> bool:
    """The base runs in bf16 on GPUs only (on CPU the torch backend trains in fp32; its worker says so)."""
    return on_gpu and recipe.train.precision == "bf16"


def training_arguments(recipe: Recipe, world_size: int, on_gpu: bool) -> dict[str, Any]:
    """The recipe's optimizer, schedule, batch, precision, recompute, sharding, logging and checkpoint settings as
    TrainingArguments keys, every TRL default that differs set explicitly (TRL 1.16: lr 2e-5, linear schedule,
    gradient_checkpointing and bf16 on, logging every 10 steps, ...). The torch backend and the export share them."""
    t = recipe.train
    fsdp = uses_fsdp(recipe, world_size)  # on CPU accelerate quietly runs this as DDP
    return {
        "learning_rate": t.learning_rate,
        "lr_scheduler_type": SCHEDULES[t.schedule],
        "warmup_steps": t.warmup_steps,
        # fused on GPUs (TRL's default); the for-each kernel on CPU gives bit-identical sharded and unsharded runs
        "optim": "adamw_torch_fused" if on_gpu else "adamw_torch",
        "weight_decay": t.weight_decay,
        "adam_beta1": t.adam_beta1,
        "adam_beta2": t.adam_beta2,
        "adam_epsilon": t.adam_eps,
        "max_grad_norm": t.max_grad_norm or 0.0,  # 0 = no clipping (the norm is still measured)
        "per_device_train_batch_size": t.per_device_batch_size,
        "gradient_accumulation_steps": t.accumulation(world_size),  # from the global batch: per GPU
        "seed": t.seed,
        "data_seed": t.seed,
        "bf16": trains_in_bf16(recipe, on_gpu),
        "fp16": False,
        "gradient_checkpointing": t.gradient_checkpointing and not fsdp,
        "fsdp": fsdp,  # sharding and wrapping come from fsdp_config
        "fsdp_config": fsdp_settings(recipe) if fsdp else None,
        "logging_steps": t.log_every,
        "save_steps": t.checkpoint_every,
        "save_total_limit": t.keep_last,
    }


def export_trl(recipe: Recipe) -> tuple[dict[str, Any], list[Unmapped]]:
    """The torch leg as a `trl sft --config` file (a dict in TRL's key order) and what it can't carry."""
    missing: list[Unmapped] = []
    m, lora, d, t, k = recipe.model, recipe.lora, recipe.data, recipe.train, recipe.train.kernels
    world = recipe.backend.torch.devices * recipe.backend.torch.nodes
    out: dict[str, Any] = {"model_name_or_path": model_ref(recipe)}
    if m.revision:
        out["model_revision"] = m.revision
    out.update(dtype=m.dtype, attn_implementation=ATTENTION[k.attention], use_peft=True, lora_r=lora.rank)
    out["lora_alpha"] = round(lora.alpha)
    if lora.alpha != round(lora.alpha):
        missing.append(Unmapped("lora.alpha", f"TRL's lora_alpha is a whole number, {lora.alpha:g} is not",
                                f"lora_alpha {round(lora.alpha)}"))  # fmt: skip
    out["lora_dropout"] = lora.dropout
    # one regex (a one-item list is a regex to TRL): the language model's decoder layers only
    out["lora_target_modules"] = [get_family(m.family).peft_target_regex(list(lora.targets))]
    out["datasets"] = _datasets(recipe, missing)
    # padding-free rows without packing: TRL 1.16 refuses to start while max_length is set (unpacked rows are padded)
    out.update(max_length=d.max_seq_len, packing=d.packing, padding_free=d.packing)
    out.update(_mask(recipe, missing))
    out.update(training_arguments(recipe, world, on_gpu=True))
    out.update({"max_steps": t.max_steps} if t.max_steps else {"num_train_epochs": t.epochs})
    out.update(torch_compile=k.compile, logging_strategy="steps", save_strategy="steps", report_to="none",
               output_dir=f"{recipe.name}-trl")  # fmt: skip
    if not out["fsdp"]:
        del out["fsdp"], out["fsdp_config"]
    missing += _not_carried(recipe)
    return out, missing


def _datasets(recipe: Recipe, missing: list[Unmapped]) -> list[dict[str, Any]]:
    """DatasetMixtureConfig entries (`load_dataset` arguments) for the training sources."""
    out = []
    for i, src in enumerate(recipe.data.sources):
        key = f"data.sources[{i}]"
        if src.split != "train":
            missing.append(Unmapped(key, "an eval source: the export trains only", "TRL's eval_dataset"))
            continue
        if (repo := hub_dataset_id(src, recipe.base_dir)) is not None:
            entry = {"path": repo, **({"name": src.config} if src.config else {}), "split": src.hub_split or "train"}
            if src.revision:
                missing.append(Unmapped(f"{key}.revision", "TRL's dataset entries take no revision", "pin the "
                                        "data by a commit-named copy"))  # fmt: skip
            out.append(entry)
            continue
        p = Path(src.path).expanduser()
        p = p if p.is_absolute() or recipe.base_dir is None else (recipe.base_dir / p).resolve()
        fmt = src.format if src.format != "auto" else {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}.get(
            p.suffix, "hf_disk" if p.suffix == "" else "?"
        )  # fmt: skip
        if fmt not in TABLE_BUILDERS:
            missing.append(Unmapped(key, f"{src.path}: `load_dataset` reads no {fmt} source",
                                    "convert it to JSONL or Parquet"))  # fmt: skip
            continue
        out.append({"path": TABLE_BUILDERS[fmt], "data_files": str(p), "split": "train"})
    return out


def _mask(recipe: Recipe, missing: list[Unmapped]) -> dict[str, Any]:
    """The loss mask as TRL's switches for the data's columns."""
    cols, preset = recipe.data.columns, recipe.data.columns.preset
    named = cols.resolved()
    if preset == "prompt_completion" and (named["prompt"], named["response"]) == ("prompt", "completion"):
        return {"completion_only_loss": True, "assistant_only_loss": False}
    if preset == "messages" and named["messages"] == "messages" and cols.message_keys == ("role", "content"):
        missing.append(Unmapped("data.columns", "TRL's assistant_only_loss needs {% generation %} markers in the "
                                "chat template: Gemma 4's has none and TRL refuses to start; Gemma 3's is swapped for "
                                "TRL's training template (transformers >= 5.18)", "TRL's conversational "
                                "prompt/completion columns (data.columns.preset prompt_completion)"))  # fmt: skip
        return {"assistant_only_loss": True}
    missing.append(Unmapped("data.columns", f"preset {preset} ({', '.join(f'{k}: {v}' for k, v in named.items() if v)})"
                            ": TRL reads a `messages` column or `prompt`/`completion` columns",
                            "rename the columns to TRL's, preset prompt_completion or messages"))  # fmt: skip
    return {"completion_only_loss": True}


def _not_carried(recipe: Recipe) -> list[Unmapped]:
    d, k = recipe.data, recipe.train.kernels
    out = []
    if d.system_prompt.policy != "keep":
        out.append(Unmapped("data.system_prompt", f"policy {d.system_prompt.policy}: TRL trains the data's system "
                            "prompt as written", "rewrite the data"))  # fmt: skip
    if d.reasoning != "keep_inline":
        out.append(Unmapped("data.reasoning", f"{d.reasoning}: crosstune rewrites the reasoning in assistant text "
                            "(<think> blocks, <answer> tags); TRL trains the text as written",
                            "data without reasoning markup, or data.reasoning keep_inline"))  # fmt: skip
    if d.truncation == "drop":
        out.append(Unmapped("data.truncation", "drop: TRL truncates a longer example to max_length (its start) "
                            "instead of dropping it", "data.truncation truncate"))  # fmt: skip
    if d.subsample is not None:
        out.append(Unmapped("data.subsample", "TRL reads every record of the split", "a sliced split (train[:N])"))
    if k.loss == "cce":
        out.append(Unmapped("train.kernels.loss", "cce: TRL's CLI has no cut-cross-entropy switch",
                            "use_liger_kernel (Liger's fused linear cross-entropy)"))  # fmt: skip
    if k.recompute == "selective" or not k.lora_input_cast or not k.token_metrics:
        out.append(Unmapped("train.kernels", "recompute selective, lora_input_cast and token_metrics are crosstune's "
                            "switches around TRL's trainer", "TRL's defaults (full recompute, PEFT's casts, "
                            "token metrics on)"))  # fmt: skip
    return out
