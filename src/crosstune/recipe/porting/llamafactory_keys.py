"""LLaMA-Factory's config keys (`llamafactory-cli train FILE`: its ModelArguments, DataArguments, FinetuningArguments
over transformers' Seq2SeqTrainingArguments) and the dataset definitions its `dataset:` names resolve through
(`dataset_dir/dataset_info.json`): the one table both `recipe import --from llamafactory` and `recipe export --to
llamafactory` read. Defaults are LLaMA-Factory's (LoRA rank 8, alpha 2 × rank, dropout 0, lora_target all,
cutoff_len 2048, no packing, recompute on) and transformers' under them (lr 5e-5, linear schedule, 3 epochs)."""

from __future__ import annotations

from crosstune.bounds import RECIPE, Bound
from crosstune.recipe.porting.typed import Key, anything, mapping, number, switch, table, text, whole
from crosstune.recipe.training_arguments import trainer_keys

# Keys only LLaMA-Factory's configs have beside model_name_or_path (how `recipe import` tells them from TRL's)
OWN = ("finetuning_type", "stage", "template", "cutoff_len", "lora_rank", "lora_target", "dataset_dir")
DATASET_INFO = "dataset_info.json"
ONLINE = "ONLINE"  # dataset_dir's word for "the names are hub ids"
# flash_attn -> train.kernels.attention (auto: transformers' default, SDPA)
ATTENTION = {"auto": "sdpa", "sdpa": "sdpa", "disabled": "eager"}
MEDIA = (
    "image_max_pixels",
    "image_min_pixels",
    "image_do_pan_and_scan",
    "video_max_pixels",
    "video_min_pixels",
    "video_fps",
    "video_maxlen",
    "use_audio_in_video",
    "audio_sampling_rate",
    "freeze_vision_tower",
    "freeze_multi_modal_projector",
    "freeze_language_model",
    "media_dir",
)
OTHER_METHODS = (
    "use_galore",
    "use_apollo",
    "use_badam",
    "use_llama_pro",
    "pissa_init",
    "use_unsloth",
    "enable_liger_kernel",
    "use_dora",
    "pure_bf16",
    "resize_vocab",
    "train_from_scratch",
)

_LOGS = "where and how LLaMA-Factory logs and caches; crosstune writes its run directory"
_EVALS = "evaluation during training; crosstune's eval stage scores pass@k after it"
_LOADER = "loader, tokenizer and inference details the family's checkpoint and crosstune's legs settle"

# One dataset's definition in dataset_info.json (LLaMA-Factory's data/README.md)
COLUMNS = table(
    *(
        Key(k, text)
        for k in (
            "prompt",
            "query",
            "response",
            "history",
            "messages",
            "system",
            "tools",
            "images",
            "videos",
            "audios",
            "chosen",
            "rejected",
            "kto_tag",
        )
    )
)
TAGS = table(
    *(
        Key(k, text)
        for k in (
            "role_tag",
            "content_tag",
            "user_tag",
            "assistant_tag",
            "observation_tag",
            "function_tag",
            "system_tag",
        )
    )
)
DATASET = table(
    Key("hf_hub_url", text),
    Key("ms_hub_url", text),
    Key("om_hub_url", text),
    Key("script_url", text),
    Key("cloud_file_name", text),
    Key("file_name", text),
    Key("file_sha1", text),
    Key("formatting", text, "alpaca"),
    Key("ranking", switch, False),
    Key("subset", text),
    Key("split", text, "train"),
    Key("folder", text),
    Key("num_samples", whole, bound=RECIPE["data.subsample.size"]),
    Key("columns", mapping, fields=COLUMNS),
    Key("tags", mapping, fields=TAGS),
)
# What LLaMA-Factory reads when a definition leaves them out
ALPACA = {"prompt": "instruction", "query": "input", "response": "output"}
SHAREGPT = {
    "messages": "conversations",
    "role_tag": "from",
    "content_tag": "value",
    "user_tag": "human",
    "assistant_tag": "gpt",
    "system_tag": "system",
}

KEYS = table(
    Key("model_name_or_path", text),
    Key("model_revision", text, "main"),
    Key("adapter_name_or_path", text),
    Key("quantization_bit", whole, bound=Bound(2, 8, "bits")),
    Key("quantization_method", text, "bnb"),
    *(
        Key(k, anything, ignored="part of quantization_bit")
        for k in ("quantization_type", "double_quantization", "quantization_device_map")
    ),
    Key("flash_attn", text, "auto"),
    Key("rope_scaling", anything),
    Key("disable_gradient_checkpointing", switch, False),
    Key("upcast_layernorm", switch),
    Key("upcast_lmhead_output", switch),
    Key("add_tokens", anything),
    Key("add_special_tokens", anything),
    *(Key(k, anything) for k in MEDIA),
    *(Key(k, switch) for k in OTHER_METHODS),
    Key("stage", text, "sft"),
    Key("finetuning_type", text, "lora"),
    Key("lora_rank", whole, 8, recipe="lora.rank"),
    Key("lora_alpha", number, bound=RECIPE["lora.alpha"]),
    Key("lora_dropout", number, 0.0, recipe="lora.dropout"),
    Key("lora_target", text, "all"),
    Key("additional_target", text),
    Key("use_rslora", switch, False),
    Key("loraplus_lr_ratio", number, bound=Bound(0, 1e6, "LoRA+'s B / A rate")),
    Key("create_new_adapter", switch),
    Key("dataset", text),
    Key("dataset_dir", text, "data"),
    Key("template", text),
    Key("cutoff_len", whole, 2048, recipe="data.max_seq_len"),
    Key("max_samples", whole, bound=RECIPE["data.subsample.size"]),
    Key("train_on_prompt", switch, False),
    Key("mask_history", switch, False),
    Key("packing", switch),
    Key("neat_packing", switch, False),
    Key("val_size", number, 0.0, bound=Bound(0, 10**8, "a fraction of the data, or rows")),
    Key("streaming", switch, False),
    Key("mix_strategy", text, "concat"),
    Key("interleave_probs", anything),
    *trainer_keys(),
    Key("eval_dataset", anything, ignored=_EVALS),
    *(
        Key(k, anything, ignored=_LOGS)
        for k in (
            "plot_loss",
            "overwrite_cache",
            "preprocessing_num_workers",
            "preprocessing_batch_size",
            "tokenized_path",
            "cache_dir",
            "print_param_status",
            "hf_hub_token",
            "ms_hub_token",
            "buffer_size",
            "eval_on_each_dataset",
        )
    ),
    *(
        Key(k, anything, ignored=_LOADER)
        for k in (
            "use_fast_tokenizer",
            "trust_remote_code",
            "low_cpu_mem_usage",
            "infer_backend",
            "infer_dtype",
            "ignore_pad_token_for_loss",
            "tool_format",
            "use_reentrant_gc",
        )
    ),
)
