"""The recipe as transformers' TrainingArguments, the settings TRL's and LLaMA-Factory's trainers read: what the
torch backend trains with (crosstune.train.torch.config adds what only a pre-tokenized in-process run needs) and what
`recipe export --to trl|llamafactory` writes. transformers' own names live here once: schedules, attention kernels,
AdamW optimizers, and TrainingArguments' keys as rows of a foreign format's table (TRAINER_KEYS), which the TRL and
LLaMA-Factory tables include and whose direct rows `training_arguments` writes: an import reads the same rows."""

from __future__ import annotations

from typing import Any

from crosstune.bounds import RECIPE, STEPS, Bound
from crosstune.families import get_family, model_dir_spec
from crosstune.recipe.load import model_path
from crosstune.recipe.porting.typed import Key, anything, mapping, number, switch, text, whole
from crosstune.recipe.schema import Recipe

# train.schedule -> transformers' SchedulerType: linear warm-up, then the curve (its `constant` has no warm-up at all)
SCHEDULES = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}
NO_WARMUP_SCHEDULE = "constant"  # transformers' constant: crosstune's constant without its warm-up
# train.kernels.attention -> transformers' attn_implementation
ATTENTION = {"sdpa": "sdpa", "eager": "eager", "flex": "flex_attention"}
ADAMW = ("adamw_torch", "adamw_torch_fused", "adamw_hf")  # transformers' AdamW optimizers: crosstune's AdamW


def schedule_of(name: Any) -> str | None:
    """crosstune's train.schedule for transformers' scheduler `name` (None: one crosstune doesn't run)."""
    return "constant" if name == NO_WARMUP_SCHEDULE else {v: k for k, v in SCHEDULES.items()}.get(name)


def attention_of(name: Any) -> str | None:
    """crosstune's train.kernels.attention for transformers' attn_implementation `name` (None: its default, sdpa)."""
    return "sdpa" if name is None else {v: k for k, v in ATTENTION.items()}.get(name)


_LOGS = "where and how the tool logs, saves and publishes; crosstune writes metrics.jsonl in its run directory"
_EVALS = "evaluation during training; crosstune's eval stage scores pass@k after it"
_CHECKPOINTS = "checkpoint mechanics; crosstune checkpoints every train.checkpoint_every steps and resumes"
_WORKERS = "how the trainer feeds its workers; crosstune's torch leg sets these itself (padding-free, one seed)"
RATIO = Bound(0, 1, "a fraction of the run's optimizer steps")
_FSDP_CONFIG = {
    k.name: k
    for k in (Key("activation_checkpointing", switch), Key("offload_params", switch), Key("cpu_offload", switch))
}

# transformers' TrainingArguments defaults of the keys below that a tool may change
TRANSFORMERS_DEFAULTS = {
    "learning_rate": 5e-5,
    "lr_scheduler_type": "linear",
    "warmup_steps": 0,
    "weight_decay": 0.0,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "max_grad_norm": 1.0,
    "optim": "adamw_torch",
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "num_train_epochs": 3.0,
    "max_steps": -1,
    "seed": 42,
    "logging_steps": 500,
    "save_steps": 500,
    "gradient_checkpointing": False,
    "bf16": False,
    "fp16": False,
    "torch_compile": False,
    "use_liger_kernel": False,
}

# TrainingArguments' keys as table rows (their defaults: TRANSFORMERS_DEFAULTS, or a tool's own)
_TRAINER_ROWS = (
    Key("learning_rate", number, recipe="train.learning_rate"),
    Key("lr_scheduler_type", text),
    Key("lr_scheduler_kwargs", anything),
    Key("warmup_steps", number, bound=Bound(0, STEPS.high, "optimizer steps, or below 1 a fraction of them")),
    Key("warmup_ratio", number, bound=RATIO),
    Key("weight_decay", number, recipe="train.weight_decay"),
    Key("adam_beta1", number, recipe="train.adam_beta1"),
    Key("adam_beta2", number, recipe="train.adam_beta2"),
    Key("adam_epsilon", number, recipe="train.adam_eps"),
    Key("max_grad_norm", number, bound=Bound(0, 1e6, "gradient norm, 0: no clipping")),
    Key("optim", text),
    Key("per_device_train_batch_size", whole, recipe="train.per_device_batch_size"),
    Key("gradient_accumulation_steps", whole, bound=RECIPE["train.grad_accumulation"]),
    Key("num_train_epochs", number, bound=RECIPE["train.epochs"]),
    Key("max_steps", whole, bound=Bound(-1, STEPS.high, "optimizer steps, -1: from the epochs")),
    Key("seed", whole, recipe="train.seed"),
    Key("data_seed", whole, ignored=_WORKERS),
    Key("bf16", switch),
    Key("fp16", switch),
    Key("tf32", switch),
    Key("gradient_checkpointing", switch),
    Key("gradient_checkpointing_kwargs", anything, ignored=_WORKERS),
    Key("fsdp", anything),
    Key("fsdp_config", mapping, fields=_FSDP_CONFIG),
    Key("deepspeed", anything),
    Key("torch_compile", switch),  # crosstune compiles each decoder layer, never the whole model
    Key("use_liger_kernel", switch),
    Key("neftune_noise_alpha", number, bound=Bound(0, 1e6, "noise scale")),
    Key("logging_steps", number, bound=Bound(0, STEPS.high, "optimizer steps, or below 1 a fraction of them")),
    Key("save_steps", number, bound=Bound(0, STEPS.high, "optimizer steps, or below 1 a fraction of them")),
    Key("save_total_limit", whole, recipe="train.keep_last"),
    *(
        Key(k, anything, ignored=_LOGS)
        for k in (
            "output_dir",
            "run_name",
            "report_to",
            "logging_dir",
            "logging_strategy",
            "logging_first_step",
            "disable_tqdm",
            "push_to_hub",
            "hub_model_id",
            "hub_strategy",
            "hub_private_repo",
            "hub_token",
        )
    ),
    *(
        Key(k, anything, ignored=_EVALS)
        for k in (
            "eval_strategy",
            "eval_steps",
            "per_device_eval_batch_size",
            "do_eval",
            "do_predict",
            "eval_on_start",
            "eval_accumulation_steps",
        )
    ),
    Key("do_train", anything, ignored="the trainer's switch to train: crosstune's train stage is that"),
    Key("evaluation_strategy", anything, alias_of="eval_strategy"),
    *(
        Key(k, anything, ignored=_CHECKPOINTS)
        for k in ("save_strategy", "save_only_model", "resume_from_checkpoint", "overwrite_output_dir")
    ),
    *(
        Key(k, anything, ignored=_WORKERS)
        for k in (
            "dataloader_num_workers",
            "dataloader_pin_memory",
            "dataloader_drop_last",
            "dataloader_prefetch_factor",
            "ddp_find_unused_parameters",
            "ddp_timeout",
            "use_cpu",
            "remove_unused_columns",
            "include_num_input_tokens_seen",
            "average_tokens_across_devices",
        )
    ),
)


def trainer_keys(**defaults: Any) -> tuple[Key, ...]:
    """TrainingArguments' keys as table rows, with a tool's own `defaults` (TRL's SFTConfig and LLaMA-Factory
    change several of transformers')."""
    base = TRANSFORMERS_DEFAULTS | defaults
    return tuple(
        Key(r.name, r.kind, base.get(r.name), r.recipe, r.bound, r.ignored, r.alias_of, r.fields) for r in _TRAINER_ROWS
    )


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
    gradient_checkpointing and bf16 on, logging every 10 steps, ...). The torch backend and the exports share them;
    the keys of the same meaning as a recipe setting are TRAINER_KEYS' direct rows, the ones an import reads back."""
    t = recipe.train
    fsdp = uses_fsdp(recipe, world_size)  # on CPU accelerate quietly runs this as DDP
    direct = {k.name: recipe_value(recipe, k.recipe) for k in TRAINER_KEYS if k.recipe}
    return {
        **direct,
        "lr_scheduler_type": SCHEDULES[t.schedule],
        # a float below 1 is a fraction of the run's steps (transformers 5: ceil(steps × ratio), the step plan's rule)
        "warmup_steps": t.warmup_ratio if t.warmup_ratio is not None else t.warmup_steps,
        # fused on GPUs (TRL's default); the for-each kernel on CPU gives bit-identical sharded and unsharded runs
        "optim": "adamw_torch_fused" if on_gpu else "adamw_torch",
        "max_grad_norm": t.max_grad_norm or 0.0,  # 0 = no clipping (the norm is still measured)
        "gradient_accumulation_steps": t.accumulation(world_size),  # from the global batch: per GPU
        "data_seed": t.seed,
        "bf16": trains_in_bf16(recipe, on_gpu),
        "fp16": False,
        "gradient_checkpointing": t.gradient_checkpointing and not fsdp,
        "fsdp": fsdp,  # sharding and wrapping come from fsdp_config
        "fsdp_config": fsdp_settings(recipe) if fsdp else None,
        "logging_steps": t.log_every,
        "save_steps": t.checkpoint_every,
    }


def recipe_value(recipe: Recipe, path: str) -> Any:
    """The value at a recipe setting's dotted path (`train.learning_rate`)."""
    node: Any = recipe
    for part in path.split("."):
        node = getattr(node, part)
    return node


TRAINER_KEYS = trainer_keys()  # transformers' own defaults (the direct rows' names are what matters here)
