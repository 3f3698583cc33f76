"""`recipe import --from llamafactory`: a LLaMA-Factory LoRA SFT config (`llamafactory-cli train FILE`) as a crosstune
recipe, through LLaMA-Factory's key table (crosstune.recipe.porting.llamafactory_keys): every key mapped, listed as not
mapped (why, and the nearest crosstune setting) or as ignored; the `dataset:` names resolved through
`dataset_dir/dataset_info.json` into sources and a column mapping. Another stage (pre-training, DPO, ...) or
fine-tuning type (full, freeze, OFT) is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crosstune.recipe.porting.llamafactory_keys import (
    ALPACA,
    ATTENTION,
    DATASET,
    DATASET_INFO,
    MEDIA,
    ONLINE,
    OTHER_METHODS,
    SHAREGPT,
)
from crosstune.recipe.porting.named_data import TEXT_ONLY, config_path, data_path, peek_columns, text_only
from crosstune.recipe.porting.named_model import (
    ModelId,
    hf_model,
    qlora_line,
    resolve_targets,
    set_alpha,
)
from crosstune.recipe.porting.port import ImportRefused, Keys, Port
from crosstune.recipe.porting.target import ImportOptions, deepspeed_devices, set_hardware
from crosstune.recipe.porting.training import set_held_out, trainer_batch, trainer_settings
from crosstune.recipe.porting.typed import Key, Source, mapping, typed_config
from crosstune.untrusted_files import read_json

# LLaMA-Factory's chat templates of the families crosstune trains, and what its gemma4 template adds
TEMPLATES = {"gemma3": "gemma3", "gemma4": "gemma4"}
GEMMA4_TEMPLATE = (
    "LLaMA-Factory's gemma4 template opens every example with a system turn that switches thinking on "
    "(<|think|>) and, without a system prompt in the data, its default one ('You are a helpful "
    "assistant.'): crosstune renders the model's own template"
)
# Columns crosstune's presets name, to write the preset rather than its names (a round trip gives the recipe back)
PRESETS = {
    "codev_r1": ("system", "prompt", "response"),
    "qa": (None, "question", "answer"),
    "prompt_completion": (None, "prompt", "completion"),
}


def import_llamafactory(take: Keys, source: Path, options: ImportOptions) -> Port:
    """The recipe a LLaMA-Factory config describes (Port.recipe) and what did not carry over."""
    port = Port(source, "llamafactory")
    if take("stage") != "sft":
        raise ImportRefused(f"{source}: stage {take('stage')}: crosstune trains supervised fine-tuning (stage: sft)")
    if take("finetuning_type") != "lora":
        raise ImportRefused(
            f"{source}: finetuning_type {take('finetuning_type')} (not LoRA): crosstune trains LoRA; "
            "set finetuning_type: lora"
        )
    model = hf_model(port, take, source)
    port.set("model.dtype", "bfloat16")
    take.direct(port)
    _method(port, take, model)
    _data(port, take, source, model.family)
    set_hardware(port, options.hardware, model)
    # LLaMA-Factory recomputes unless told not to (its own switch; TrainingArguments' one adds nothing)
    trainer_settings(
        port, take, recompute=bool(take("gradient_checkpointing")) or not take("disable_gradient_checkpointing")
    )
    port.set("train.precision", "bf16" if take("bf16") else "fp32")  # neither bf16 nor fp16: fp32, as it trains
    devices = deepspeed_devices(take("deepspeed"), source.parent, "deepspeed") if take("deepspeed") else (None, "")
    trainer_batch(port, take, options, devices)
    take.rest(port)
    return port


def _method(port: Port, take: Keys, model: ModelId) -> None:
    """The base (quantized or not), the LoRA and the kernels."""
    bits = take("quantization_bit")
    if bits == 4:
        qlora_line(port, "quantization_bit: 4", model)
    elif bits is not None:
        port.miss(
            "quantization_bit", f"{bits}: a {bits}-bit base ({take('quantization_method')})", "LoRA on a bf16 base"
        )
    if take("adapter_name_or_path"):
        take("create_new_adapter")
        port.miss(
            "adapter_name_or_path",
            "starting from a saved adapter: crosstune trains LoRA from its own initial draw",
            "lora",
        )
    rank, alpha = take("lora_rank"), take("lora_alpha")
    if alpha is None:
        alpha = 2 * rank
        port.notes.append(f"lora.alpha {alpha}: no lora_alpha, so LLaMA-Factory's default, 2 × lora_rank")
    set_alpha(port, alpha, rank, "use_rslora" if take("use_rslora") else None)
    target = take("lora_target")
    names = "all-linear" if target.strip() == "all" else [t.strip() for t in target.split(",") if t.strip()]
    resolve_targets(port, "lora_target", names, model)
    if take("additional_target"):
        port.miss("additional_target", "whole modules trained beside the LoRA", "lora")
    if take("loraplus_lr_ratio"):
        port.miss("loraplus_lr_ratio", "LoRA+'s B rate: crosstune trains A and B at one rate", "train.learning_rate")
    attention = ATTENTION.get(take("flash_attn"))
    port.set("train.kernels.attention", attention or "sdpa")
    if attention is None:
        port.miss(
            "flash_attn",
            f"{take('flash_attn')}: FlashAttention, which crosstune's torch leg does not run",
            "train.kernels.attention sdpa",
        )
    for key in OTHER_METHODS:
        if take(key):
            port.miss(
                key, "a LLaMA-Factory method or kernel crosstune does not run", "crosstune's LoRA and train.kernels"
            )
    for key, why in (
        ("rope_scaling", "the model's RoPE stretched"),
        ("upcast_layernorm", "layer norms in fp32"),
        ("upcast_lmhead_output", "the LM head's output in fp32"),
        ("add_tokens", "tokens added to the vocabulary"),
        ("add_special_tokens", "tokens added to the vocabulary"),
    ):
        if take(key):
            port.miss(key, f"{why}: crosstune trains the checkpoint as it is", "")
    for key in MEDIA:
        if take(key):
            port.miss(key, f"a vision, video or audio setting: {TEXT_ONLY}", "a text-only config of the same model")


def _data(port: Port, take: Keys, source: Path, family: str) -> None:
    names = [n.strip() for n in (take("dataset") or "").split(",") if n.strip()]
    if not names:
        raise ImportRefused(f"{source}: no dataset: name the training data (dataset: NAME of its dataset_info.json)")
    found = [_dataset(port, name, take("dataset_dir"), source) for name in names]
    columns = {tuple(sorted(c.items())) for _, c in found}
    if len(columns) > 1:
        raise ImportRefused(
            f"{source}: dataset {take('dataset')}: their columns differ, and one mapping reads every "
            "source: give crosstune copies in one layout"
        )
    port.set("data.sources", [src for src, _ in found])
    port.set("data.columns", found[0][1])
    port.set("data.reasoning", "keep_inline")  # LLaMA-Factory trains the text as written
    port.set("data.truncation", "truncate")
    port.notes.append(
        "data.truncation truncate: cutoff_len cuts an over-long example's prompt and answer each in "
        "proportion; crosstune keeps its first max_seq_len tokens"
    )
    template = take("template")
    if template is not None and template != TEMPLATES[family]:
        port.miss(
            "template",
            f"{template}: crosstune renders with the model's own template (what is trained is what is served)",
            f"the {family} template",
        )
    elif template == "gemma4":
        port.miss("template", GEMMA4_TEMPLATE, "the gemma4 chat template (thinking off, the data's system prompt)")
    packing, neat = take("packing"), take("neat_packing")
    port.set("data.packing", bool(packing or neat))
    if packing and not neat:
        port.miss(
            "packing",
            "true without neat_packing: LLaMA-Factory's packed examples attend to each other; "
            "crosstune's packed rows keep each example to itself",
            "neat_packing (data.packing)",
        )
    if take("train_on_prompt"):
        port.miss("train_on_prompt", "true: LLaMA-Factory trains the prompts too", "crosstune's assistant-only loss")
    if take("mask_history"):
        port.miss(
            "mask_history",
            "true: LLaMA-Factory trains only each conversation's last answer",
            "crosstune trains every answer",
        )
    if take("max_samples"):
        port.miss(
            "max_samples",
            f"{take('max_samples')}: the first rows of each dataset",
            "data.subsample (a seeded sample of them all)",
        )
    set_held_out(port, take, "val_size", "LLaMA-Factory")
    for key in ("streaming", "interleave_probs"):
        if take(key):
            port.miss(key, "how LLaMA-Factory streams or mixes its datasets", "data.sources (read whole, in order)")
    if take("mix_strategy") != "concat":
        port.miss("mix_strategy", f"{take('mix_strategy')}: datasets interleaved", "data.sources (concatenated)")


def _dataset(port: Port, name: str, dataset_dir: str, source: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """One `dataset:` name as a source and its column mapping, through dataset_info.json (ONLINE: a hub id read
    in LLaMA-Factory's default alpaca layout)."""
    key = f"dataset: {name}"
    if dataset_dir == ONLINE:
        path, _ = data_path(key, name, source.parent)
        return {"path": path}, _alpaca(port, key, {}, None)
    folder = config_path(dataset_dir, source.parent)
    info_file = folder / DATASET_INFO
    if not info_file.is_file():
        raise ImportRefused(
            f"{key}: no {info_file} (dataset_dir {dataset_dir!r}, read against the config's folder; "
            "LLaMA-Factory reads it from where it runs): set dataset_dir to the folder of your "
            f"{DATASET_INFO}"
        )
    info = read_json(info_file)
    if not isinstance(info, dict) or name not in info:
        raise ImportRefused(f"{key}: not defined in {info_file}: add its definition, or name one of its datasets")
    entry = typed_config({name: info[name]}, {name: Key(name, mapping, fields=DATASET)}, Source(info_file, {}))[0]
    entry = entry.get(name, {})
    for unread in sorted(set(entry) - set(DATASET)):
        port.miss(f"{key}: {unread}", "a dataset_info key crosstune does not read", "data.sources")
    if entry.get("ranking"):
        raise ImportRefused(f"{key}: a preference dataset (ranking: true): crosstune trains supervised fine-tuning")
    if entry.get("hf_hub_url"):
        path, is_hub = data_path(key, entry["hf_hub_url"], source.parent)
        src: dict[str, Any] = {"path": path}
        src.update({"config": entry["subset"]} if entry.get("subset") else {})
        src.update({"hub_split": entry["split"]} if entry.get("split", "train") != "train" else {})
        if entry.get("folder"):
            port.miss(f"{key}: folder", f"{entry['folder']}: a folder of the hub repo", "a hub config (subset)")
    elif entry.get("file_name"):
        path, is_hub = data_path(key, str(folder / entry["file_name"]), source.parent)
        _refuse_json_array(key, Path(path))
        src = {"path": path}
    else:
        there = next((k for k in ("ms_hub_url", "om_hub_url", "script_url", "cloud_file_name") if entry.get(k)), "?")
        raise ImportRefused(
            f"{key}: {there} in {info_file}: crosstune reads local files and Hugging Face hub datasets "
            "(file_name, hf_hub_url)"
        )
    if entry.get("num_samples"):
        port.miss(f"{key}: num_samples", f"{entry['num_samples']}: rows drawn from it", "data.subsample")
    columns = peek_columns(src["path"], is_hub)
    text_only(port, key, columns)
    formatting = entry.get("formatting", "alpaca")
    if formatting == "alpaca":
        return src, _alpaca(port, key, entry, columns)
    if formatting in ("sharegpt", "openai"):
        return src, _sharegpt(port, key, entry, formatting)
    raise ImportRefused(f"{key}: formatting {formatting!r}: crosstune reads alpaca, sharegpt and openai layouts")


def _alpaca(port: Port, key: str, entry: dict, columns: set[str] | None) -> dict[str, Any]:
    """An instruction / input / output layout as crosstune's prompt, response and system columns: LLaMA-Factory joins
    a non-empty input to the instruction, which crosstune's one prompt column can't."""
    named = {**ALPACA, **(entry.get("columns") or {})}
    if named.get("query") and (columns is None or named["query"] in columns):
        why = "is a column of the data" if columns else "may be a column of the data (not at hand to look at)"
        port.miss(
            f"{key}: columns.query",
            f"{named['query']} {why}: LLaMA-Factory appends it to the instruction "
            "(instruction + newline + input); crosstune reads one prompt column",
            "a copy of the data with the input joined to the instruction",
        )
    if named.get("history"):
        port.miss(
            f"{key}: columns.history",
            f"{named['history']}: earlier turns LLaMA-Factory trains too",
            "a messages layout (sharegpt)",
        )
    wanted = (named.get("system"), named["prompt"], named["response"])
    preset = next((p for p, cols in PRESETS.items() if cols == wanted), None)
    if preset is not None:
        return {"preset": preset}
    return {
        "preset": "custom",
        "prompt": named["prompt"],
        "response": named["response"],
        **({"system": named["system"]} if named.get("system") else {}),
    }


def _sharegpt(port: Port, key: str, entry: dict, formatting: str) -> dict[str, Any]:
    """A list of messages: its column and role/content keys; roles other than user/assistant (or ShareGPT's
    human/gpt) and system are listed."""
    openai = {
        "messages": "messages",
        "role_tag": "role",
        "content_tag": "content",
        "user_tag": "user",
        "assistant_tag": "assistant",
    }
    named = {
        **SHAREGPT,
        **(openai if formatting == "openai" else {}),
        **(entry.get("columns") or {}),
        **(entry.get("tags") or {}),
    }
    if (named["user_tag"], named["assistant_tag"]) not in (("human", "gpt"), ("user", "assistant")):
        port.miss(
            f"{key}: tags",
            f"roles {named['user_tag']}/{named['assistant_tag']}: crosstune reads user/assistant "
            "(or ShareGPT's human/gpt)",
            "data with those role names",
        )
    if named["system_tag"] != "system" or named.get("system"):
        port.miss(f"{key}: system", "a system prompt by another role name or column", "system messages in the list")
    columns = {"preset": "messages"}
    columns.update({"messages": named["messages"]} if named["messages"] != "messages" else {})
    columns.update({"message_role": named["role_tag"]} if named["role_tag"] != "role" else {})
    columns.update({"message_content": named["content_tag"]} if named["content_tag"] != "content" else {})
    return columns


def _refuse_json_array(key: str, path: Path) -> None:
    """LLaMA-Factory's data is often a JSON array (`[{...}, ...]`); crosstune reads JSON Lines."""
    if path.is_file() and path.suffix == ".json":
        with open(path, "rb") as f:
            head = f.read(4096).lstrip()
        if head.startswith(b"["):
            raise ImportRefused(
                f"{key}: {path} is a JSON array; crosstune reads JSON Lines (one record per line): "
                f"convert it, e.g. `jq -c '.[]' {path} > {path.with_suffix('.jsonl')}`, and point "
                "its file_name there"
            )
