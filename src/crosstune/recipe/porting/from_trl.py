"""`recipe import --from trl`: a `trl sft --config` file as a crosstune recipe, through TRL's key table
(crosstune.recipe.porting.trl_keys): every key mapped, listed as not mapped (why, and the nearest crosstune setting)
or as ignored (logging and the like); a key the file leaves out counts at TRL 1.16's default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crosstune.families.spec import EXPERTS_REFUSED
from crosstune.recipe.porting.named_data import data_path, peek_columns, text_only
from crosstune.recipe.porting.named_model import hf_model, qlora_line, resolve_targets, set_alpha
from crosstune.recipe.porting.port import ImportRefused, Keys, Port
from crosstune.recipe.porting.target import ImportOptions, deepspeed_devices, set_hardware
from crosstune.recipe.porting.training import trainer_batch, trainer_settings
from crosstune.recipe.training_arguments import attention_of


def import_trl(take: Keys, source: Path, options: ImportOptions) -> Port:
    """The recipe a TRL config describes (Port.recipe) and what did not carry over."""
    port = Port(source, "trl")
    if not take("use_peft"):
        raise ImportRefused(
            f"{source}: use_peft is false (a full fine-tune): crosstune trains LoRA; set use_peft: "
            "true and the lora_* keys"
        )
    model = hf_model(port, take, source)
    take.direct(port)
    _model_keys(port, take, model)
    _data(port, take, source)
    set_hardware(port, options.hardware, model)
    trainer_settings(port, take, recompute=take("gradient_checkpointing"))
    bf16 = take("bf16")  # None: TRL turns bf16 on unless fp16 is
    port.set("train.precision", "fp32" if bf16 is False and not take("fp16") else "bf16")
    trainer_batch(port, take, options, _devices(take, source.parent))
    take.rest(port)
    return port


def _devices(take: Keys, config_dir: Path) -> tuple[int | None, str]:
    """The GPUs a TRL config trains on: accelerate's num_processes, which TRL's CLI passes on (all hosts'), else its
    DeepSpeed config's batch arithmetic."""
    if take("num_processes") is not None:
        return take("num_processes"), "num_processes in the config"
    if take("deepspeed") is not None:
        return deepspeed_devices(take("deepspeed"), config_dir, "deepspeed")
    if take("accelerate_config") is not None:
        return None, f"accelerate_config {take('accelerate_config')} says how many, not read here"
    return None, ""


def _model_keys(port: Port, take: Keys, model) -> None:
    dtype = take("dtype")
    port.set("model.dtype", dtype if dtype in ("bfloat16", "float32") else "bfloat16")
    if dtype not in ("bfloat16", "float32", "auto"):
        port.miss("dtype", f"{dtype}: crosstune holds the base in bfloat16 or float32", "model.dtype bfloat16")
    attention = attention_of(take("attn_implementation"))
    port.set("train.kernels.attention", attention or "sdpa")
    if attention is None:
        port.miss(
            "attn_implementation",
            f"{take('attn_implementation')}: not a kernel crosstune's torch leg switches to",
            "train.kernels.attention sdpa (flex: FlexAttention with document masks)",
        )
    if take("load_in_4bit"):
        qlora_line(port, "load_in_4bit", model)
    if take("load_in_8bit"):
        port.miss("load_in_8bit", "an 8-bit base (bitsandbytes LLM.int8)", "LoRA on a bf16 base")
    set_alpha(port, take("lora_alpha"), take("lora_r"), "use_rslora" if take("use_rslora") else None)
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
    text_only(port, "datasets" if entries else "dataset_name", columns)
    if take("assistant_only_loss"):
        port.set("data.columns", {"preset": "messages"})
    elif columns is not None and "messages" in columns:
        port.set("data.columns", {"preset": "messages"})
        port.miss(
            "assistant_only_loss",
            "false on a messages dataset: TRL trains every token, prompts included",
            "crosstune's assistant-only loss (data.columns.preset messages)",
        )
    elif columns is not None and "text" in columns and "prompt" not in columns:
        raise ImportRefused(
            f"{source}: the data is plain text ({take('dataset_text_field')}): crosstune trains "
            "conversations (messages, or prompt/completion)"
        )
    else:
        port.set("data.columns", {"preset": "prompt_completion"})
        if take("completion_only_loss") is False:
            port.miss("completion_only_loss", "false: TRL trains the prompts too", "crosstune's completion-only loss")
        if columns is None:
            port.notes.append(
                "data.columns: the data is not at hand to look at: read as TRL's prompt/completion "
                "columns (set preset messages for a messages column)"
            )
    port.set("data.reasoning", "keep_inline")  # TRL trains the text as written
    if take.null("max_length"):
        port.miss("max_length", "null: TRL trains every example whole", "data.max_seq_len (2048 here)")
    else:
        port.set("data.max_seq_len", take("max_length"))
    port.set("data.truncation", "truncate")  # TRL keeps an over-long example's start
    if take("packing") and take("packing_strategy") != "bfd":
        port.miss(
            "packing_strategy",
            f"{take('packing_strategy')}: splits documents across rows",
            "crosstune packs whole documents",
        )


def _mixture_entry(port: Port, i: int, entry: dict[str, Any], config_dir: Path) -> tuple[dict[str, Any], bool]:
    key = f"datasets[{i}]"
    if entry.get("path") is None:
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
