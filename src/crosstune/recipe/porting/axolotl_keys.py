"""Axolotl's config keys (docs/config-reference.qmd, datasets of `type: chat_template`): the one table both
`recipe import --from axolotl` and `recipe export --to axolotl` read. Each key's kind, Axolotl's default where it
differs from having none (sequence_len 512, no packing, no recompute, LoRA dropout 0), the recipe setting of the same
meaning and value (direct), or why it changes no trained number (ignored). An export writes its keys in this
order."""

from __future__ import annotations

from crosstune.bounds import RECIPE, Bound
from crosstune.recipe.porting.typed import (
    Key,
    anything,
    entries,
    mapping,
    number,
    switch,
    switch_or_text,
    table,
    text,
    text_or_texts,
    texts,
    whole,
)
from crosstune.recipe.training_arguments import RATIO

CCE_PLUGIN = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"
# Axolotl's attention switches (one true names the kernel) and attn_implementation's values
ATTENTION_SWITCHES = {"sdp_attention": "sdpa", "eager_attention": "eager", "flex_attention": "flex"}
OTHER_ATTENTION = ("flash_attention", "xformers_attention")
LIGER = (
    "liger_rope",
    "liger_rms_norm",
    "liger_layer_norm",
    "liger_glu_activation",
    "liger_cross_entropy",
    "liger_fused_linear_cross_entropy",
)
KERNELS = ("lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel", "fused_attn_kernel", "use_kernels", "use_scattermoe")
# Keys of a vision or audio config: crosstune trains text (the import says so up front)
MULTIMODAL = ("processor_type", "freeze_mm_modules", "image_size", "image_resize_algorithm")
PARALLEL = (
    "dp_shard_size",
    "dp_replicate_size",
    "tensor_parallel_size",
    "context_parallel_size",
    "sequence_parallel_degree",
)

_LOGS = "where and how Axolotl logs, saves and publishes; crosstune writes its run directory"
_EVALS = "evaluation during training; crosstune's eval stage scores pass@k after it"
_LOADER = (
    "loader classes, padding and worker settings crosstune's legs settle themselves (LoRA freezes the base; "
    "rows are packed or padding-free)"
)
DEVICES = Bound(1, 65_536, "devices")

DATASET = table(
    Key("path", text),
    Key("type", text),
    Key("data_files", text_or_texts),
    Key("ds_type", text),
    Key("name", text),
    Key("revision", text),
    Key("split", text),
    Key("message_property_mappings", mapping),
    Key("message_field_role", text),
    Key("message_field_content", text),
    Key("field_messages", text),
    Key("roles_to_train", texts),
    Key("train_on_eos", text),
    Key("chat_template", text),
)
FSDP_CONFIG = table(Key("activation_checkpointing", switch), Key("offload_params", switch), Key("cpu_offload", switch))

KEYS = table(
    Key("base_model", text),
    Key("revision_of_model", text),
    Key("adapter", text),
    Key("load_in_4bit", switch),
    Key("load_in_8bit", switch),
    Key("bnb_config_kwargs", anything, ignored="part of the 4-bit base (load_in_4bit, adapter qlora)"),
    Key("lora_r", whole, 8, recipe="lora.rank"),  # PEFT's default
    Key("lora_alpha", number, bound=RECIPE["lora.alpha"]),
    Key("lora_dropout", number, 0.0, recipe="lora.dropout"),
    Key("peft_use_rslora", switch),
    Key("lora_target_linear", switch),
    Key("lora_target_modules", text_or_texts),
    Key("lora_target_parameters", anything),
    Key("peft_use_dora", switch),
    Key("lora_modules_to_save", anything),
    Key("lora_model_dir", text),
    Key("loraplus_lr_ratio", number, bound=Bound(0, 1e6, "LoRA+'s B / A rate")),
    Key("chat_template", text, "tokenizer_default"),
    Key("chat_template_jinja", text),
    Key("eot_tokens", texts),
    Key("special_tokens", mapping),
    Key("tokens", anything),
    Key("added_tokens_overrides", mapping),
    Key("datasets", entries, fields=DATASET),
    Key("val_set_size", number, 0.0, bound=Bound(0, 10**8, "a fraction of the data, or rows")),
    Key("sequence_len", whole, 512, recipe="data.max_seq_len"),
    Key("sample_packing", switch, False, recipe="data.packing"),
    Key("excess_length_strategy", text, "drop"),
    Key("train_on_inputs", switch, False),
    Key("micro_batch_size", whole, 1, bound=RECIPE["train.per_device_batch_size"]),
    Key("gradient_accumulation_steps", whole, 1, bound=RECIPE["train.grad_accumulation"]),
    Key("batch_size", whole, bound=RECIPE["train.global_batch_size"]),
    Key("num_epochs", number, 1.0, bound=RECIPE["train.epochs"]),
    Key("max_steps", whole, bound=RECIPE["train.max_steps"]),
    Key("learning_rate", number, recipe="train.learning_rate"),
    Key("lr_scheduler", text, "cosine"),
    Key("cosine_min_lr_ratio", number, bound=RATIO),
    Key("cosine_constant_lr_ratio", number, bound=RATIO),
    Key("optim_args", anything),
    Key("lr_groups", anything),
    Key("warmup_steps", whole, bound=RECIPE["train.warmup_steps"]),
    Key("warmup_ratio", number, bound=RATIO),
    Key("weight_decay", number, 0.0, recipe="train.weight_decay"),
    Key("optimizer", text, "adamw_torch_fused"),
    Key("adam_beta1", number, 0.9, recipe="train.adam_beta1"),
    Key("adam_beta2", number, 0.999, recipe="train.adam_beta2"),
    Key("adam_epsilon", number, 1e-8, recipe="train.adam_eps"),
    Key("max_grad_norm", number, 1.0, bound=Bound(0, 1e6, "gradient norm, 0: no clipping")),
    Key("bf16", switch_or_text, "auto"),
    Key("fp16", switch),
    Key("tf32", switch),
    Key("gradient_checkpointing", switch_or_text, False),
    Key("activation_offloading", switch_or_text),
    Key("attn_implementation", text),
    *(Key(k, switch) for k in (*ATTENTION_SWITCHES, *OTHER_ATTENTION)),
    Key("gemma4_hybrid_attn_impl", switch),
    Key("torch_compile", switch, recipe="train.kernels.compile"),
    Key("plugins", texts),
    Key("cut_cross_entropy", switch),
    *(Key(k, switch) for k in (*LIGER, *KERNELS)),
    Key("experts_implementation", text),
    Key("quantize_moe_experts", anything),
    Key("fsdp", anything),
    Key("fsdp_version", whole, bound=Bound(1, 2, "FSDP version")),
    Key("fsdp_config", mapping, fields=FSDP_CONFIG),
    Key("deepspeed", text),
    *(Key(k, whole, bound=DEVICES) for k in PARALLEL),
    *(Key(k, anything) for k in MULTIMODAL),
    Key("seed", whole, 42, recipe="train.seed"),
    Key("logging_steps", number, bound=RECIPE["train.log_every"]),
    Key("save_steps", number, bound=RECIPE["train.checkpoint_every"]),
    Key("save_total_limit", whole, recipe="train.keep_last"),
    *(
        Key(k, anything, ignored=_LOGS)
        for k in (
            "output_dir",
            "hub_model_id",
            "hub_strategy",
            "push_dataset_to_hub",
            "use_tensorboard",
            "debug",
            "dataset_prepared_path",
            "dataset_processes",
            "strict",
            "save_first_step",
            "resume_from_checkpoint",
            "auto_resume_from_checkpoints",
            "local_rank",
            "saves_per_epoch",
            "save_strategy",
        )
    ),
    *(
        Key(k, anything, ignored=_EVALS)
        for k in (
            "test_datasets",
            "evals_per_epoch",
            "eval_steps",
            "eval_table_size",
            "eval_max_new_tokens",
            "eval_batch_size",
            "eval_sample_packing",
            "early_stopping_patience",
            "eval_strategy",
        )
    ),
    *(
        Key(k, anything, ignored=_LOADER)
        for k in (
            "model_type",
            "tokenizer_type",
            "base_model_config",
            "tokenizer_config",
            "trust_remote_code",
            "tokenizer_use_fast",
            "tokenizer_legacy",
            "unfrozen_parameters",
            "ddp_find_unused_parameters",
            "pad_to_sequence_len",
            "group_by_length",
            "gradient_checkpointing_kwargs",
            "dataloader_num_workers",
            "dataloader_pin_memory",
            "dataloader_prefetch_factor",
            "remove_unused_columns",
            "skip_prepare_dataset",
        )
    ),
)
