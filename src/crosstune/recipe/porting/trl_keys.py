"""`trl sft --config`'s keys (TRL 1.16: SFTConfig over transformers' TrainingArguments, ModelConfig, ScriptArguments,
DatasetMixtureConfig of trl/scripts/sft.py; and the accelerate launch arguments TRL's CLI passes on): the one table
both `recipe import --from trl` and `recipe export --to trl` read. A key the file leaves out counts at TRL's default,
which often differs from crosstune's (lr 2e-5, linear schedule, 3 epochs, batch 8, max_length 1024, no packing, LoRA
alpha 32 and dropout 0.05): each row's default, checked against TRL's dataclasses by a test. Pre-1.0 names
(torch_dtype, max_seq_length, evaluation_strategy) are read as the keys they became."""

from __future__ import annotations

from crosstune.bounds import RECIPE, Bound
from crosstune.recipe.porting.typed import (
    Key,
    anything,
    entries,
    number,
    switch,
    table,
    text,
    text_or_texts,
    whole,
)
from crosstune.recipe.training_arguments import trainer_keys

_LOADER = "loader and tokenizer details the family's checkpoint settles"
_FEEDING = "how TRL feeds its workers; crosstune's torch leg sets these itself (padding-free, one seed)"
DATASET = table(
    Key("path", text),
    Key("name", text),
    Key("data_dir", text),
    Key("data_files", text_or_texts),
    Key("split", text),
    Key("columns", anything),
    Key("fraction", number, bound=Bound(0, 1, "a fraction of the split")),
)

KEYS = table(
    Key("model_name_or_path", text),
    Key("model_revision", text, "main"),
    Key("dtype", text, "float32"),
    Key("torch_dtype", text, alias_of="dtype"),
    Key("attn_implementation", text),
    Key("load_in_4bit", switch, False),
    Key("load_in_8bit", switch, False),
    *(
        Key(k, anything, ignored="part of load_in_4bit")
        for k in ("bnb_4bit_quant_type", "use_bnb_nested_quant", "bnb_4bit_quant_storage")
    ),
    Key("use_peft", switch, False),
    Key("lora_r", whole, 16, recipe="lora.rank"),
    Key("lora_alpha", number, 32, bound=RECIPE["lora.alpha"]),
    Key("lora_dropout", number, 0.05, recipe="lora.dropout"),
    Key("lora_target_modules", text_or_texts),
    Key("lora_target_parameters", anything),
    Key("use_rslora", switch, False),
    Key("use_dora", switch, False),
    Key("lora_modules_to_save", anything),
    Key("datasets", entries, fields=DATASET),
    Key("dataset_name", text),
    Key("dataset_config", text),
    Key("dataset_train_split", text, "train"),
    Key("dataset_text_field", text, "text"),
    Key("max_length", whole, 1024, bound=RECIPE["data.max_seq_len"]),
    Key("max_seq_length", whole, alias_of="max_length"),
    Key("packing", switch, False, recipe="data.packing"),
    Key("packing_strategy", text, "bfd"),
    Key("padding_free", switch, False, ignored=_FEEDING),
    Key("assistant_only_loss", switch, False),
    Key("completion_only_loss", switch),
    *trainer_keys(
        learning_rate=2e-5, gradient_checkpointing=True, logging_steps=10, bf16=None, optim="adamw_torch_fused"
    ),
    # accelerate's launch arguments, which TRL's CLI passes on from the config
    Key("num_processes", whole, bound=Bound(1, 65_536, "processes: one per GPU")),
    Key("num_machines", anything, ignored="accelerate's hosts: num_processes counts every host's GPUs"),
    Key("accelerate_config", text),
    Key("mixed_precision", anything, ignored="accelerate's autocast switch; the trainer's bf16 decides it here"),
    *(Key(k, anything, ignored=_FEEDING) for k in ("dataset_num_proc", "shuffle_dataset", "dataset_streaming")),
    Key(
        "dataset_test_split",
        anything,
        ignored="the split TRL evaluates on during training; crosstune's eval stage scores pass@k after it",
    ),
    *(
        Key(k, anything, ignored=_LOADER)
        for k in (
            "env",
            "trust_remote_code",
            "lora_task_type",
            "eos_token",
            "pad_token",
            "dataset_kwargs",
            "model_init_kwargs",
        )
    ),
)
