"""`recipe export --to llamafactory`: the torch leg as a LLaMA-Factory config for `llamafactory-cli train FILE`, its
key table (crosstune.recipe.porting.llamafactory_keys) in its order, and the dataset definitions its `dataset:` names
resolve through: a dataset_info.json in `dataset_dir`, the folder written beside the config (LLaMA-Factory names data
only there). What LLaMA-Factory can't say is listed one line each; `recipe import` of the file gives the recipe
back (tests/recipe/test_port_llamafactory.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crosstune.families.base import HF_TARGET_MODULES
from crosstune.recipe.porting.exported import data_not_carried, kernels_not_carried, train_sources, whole_alpha
from crosstune.recipe.porting.from_llamafactory import GEMMA4_TEMPLATE, TEMPLATES
from crosstune.recipe.porting.llamafactory_keys import ALPACA, KEYS, SHAREGPT
from crosstune.recipe.porting.named_model import model_ref
from crosstune.recipe.porting.port import Unmapped
from crosstune.recipe.porting.typed import in_table_order
from crosstune.recipe.schema import Recipe
from crosstune.recipe.training_arguments import recipe_value, training_arguments

DATASET_PREFIX = "crosstune_"  # the names this export defines in dataset_info.json
FILE_FORMATS = {".jsonl", ".json", ".parquet"}  # local files LLaMA-Factory and crosstune both read
FLASH_ATTN = {"sdpa": "sdpa", "eager": "disabled"}  # train.kernels.attention -> flash_attn


def export_llamafactory(recipe: Recipe, dataset_dir: Path) -> tuple[dict[str, Any], list[Unmapped], dict[str, Any]]:
    """(the config, what it can't carry, the dataset_info.json `dataset_dir` holds for it)."""
    missing: list[Unmapped] = []
    m, lora, d, t, k = recipe.model, recipe.lora, recipe.data, recipe.train, recipe.train.kernels
    world = recipe.backend.torch.devices * recipe.backend.torch.nodes
    shared = training_arguments(recipe, world, on_gpu=True)
    out: dict[str, Any] = {row.name: recipe_value(recipe, row.recipe) for row in KEYS.values() if row.recipe}
    out.update(model_name_or_path=model_ref(recipe), stage="sft", do_train=True, finetuning_type="lora")
    if m.revision:
        out["model_revision"] = m.revision
    out["lora_alpha"] = whole_alpha(recipe, "LLaMA-Factory", missing)
    # leaf names, matched at the end of a module's name (LLaMA-Factory keeps them off the vision tower)
    out["lora_target"] = ",".join(HF_TARGET_MODULES[target].rsplit(".", 1)[1] for target in lora.targets)
    info = _datasets(recipe, missing)
    out.update(dataset=",".join(info), dataset_dir=str(dataset_dir), template=TEMPLATES[m.family])
    if m.family == "gemma4":
        missing.append(Unmapped("template", GEMMA4_TEMPLATE, "a system prompt of your own in the data"))
    out.update({"neat_packing": True} if d.packing else {"packing": False})  # neat: no attention across examples
    out.update(train_on_prompt=False, disable_gradient_checkpointing=not t.gradient_checkpointing)
    out["flash_attn"] = FLASH_ATTN.get(k.attention, "sdpa")
    if k.attention not in FLASH_ATTN:
        missing.append(
            Unmapped("train.kernels.attention", f"{k.attention}: LLaMA-Factory has no FlexAttention", "flash_attn sdpa")
        )
    out.update(
        {
            key: shared[key]
            for key in (
                "lr_scheduler_type",
                "optim",
                "max_grad_norm",
                "gradient_accumulation_steps",
                "bf16",
                "logging_steps",
                "save_steps",
            )
        }
    )
    out.update({"warmup_ratio": t.warmup_ratio} if t.warmup_ratio is not None else {"warmup_steps": t.warmup_steps})
    out.update({"max_steps": t.max_steps} if t.max_steps else {"num_train_epochs": t.epochs})
    if shared["fsdp"]:
        out.update(fsdp=shared["fsdp"], fsdp_config=shared["fsdp_config"])
    out.update(output_dir=f"saves/{recipe.name}", report_to="none")
    if world > 1:
        missing.append(
            Unmapped(
                "backend.torch.devices",
                f"{world} GPUs: LLaMA-Factory takes them from its launch",
                f"FORCE_TORCHRUN=1 NPROC_PER_NODE={world} llamafactory-cli train FILE",
            )
        )
    missing += _not_carried(recipe)
    return in_table_order(out, KEYS), missing, info


def _datasets(recipe: Recipe, missing: list[Unmapped]) -> dict[str, Any]:
    """A dataset_info.json definition per training source, named crosstune_<recipe>_<i>."""
    cols = recipe.data.columns
    named = cols.resolved()
    if cols.preset == "messages" or named["messages"]:
        role, content = cols.message_keys
        users = ("human", "gpt") if role == "from" else ("user", "assistant")  # ShareGPT's keys, ShareGPT's roles
        tags = {"role_tag": role, "content_tag": content, "user_tag": users[0], "assistant_tag": users[1]}
        layout: dict[str, Any] = {
            "formatting": "sharegpt",
            "columns": {"messages": named["messages"]},
            "tags": {k: v for k, v in tags.items() if SHAREGPT[k] != v},
        }
    else:
        if cols.preset == "prompt_completion":
            missing.append(
                Unmapped(
                    "data.columns",
                    "prompt_completion: LLaMA-Factory's alpaca columns hold text; "
                    "TRL's conversational prompt/completion lists are not read",
                    "text columns",
                )
            )
        columns = {"prompt": named["prompt"], "response": named["response"], "system": named["system"]}
        layout = {"columns": {k: v for k, v in columns.items() if v and ALPACA.get(k) != v}}
        layout["columns"]["query"] = ""  # no input column: the instruction is the whole prompt
    out = {}
    for i, s in enumerate(train_sources(recipe, missing, "LLaMA-Factory's eval_dataset")):
        src = s.source
        if s.repo is not None:
            entry: dict[str, Any] = {"hf_hub_url": s.repo, **({"subset": src.config} if src.config else {})}
            entry.update({"split": src.hub_split} if src.hub_split else {})
            if src.revision:
                missing.append(
                    Unmapped(
                        f"{s.key}.revision",
                        "dataset_info.json takes no revision",
                        "pin the data by a commit-named copy",
                    )
                )
        elif s.path.suffix not in FILE_FORMATS or src.format == "hf_disk":
            missing.append(
                Unmapped(
                    s.key,
                    f"{src.path}: LLaMA-Factory reads JSON Lines or Parquet files here",
                    "convert it to JSONL or Parquet",
                )
            )
            continue
        else:
            entry = {"file_name": str(s.path)}  # absolute: os.path.join(dataset_dir, it) is itself
        out[f"{DATASET_PREFIX}{recipe.name}_{i}"] = {**entry, **layout}
    return out


def _not_carried(recipe: Recipe) -> list[Unmapped]:
    out = data_not_carried(
        recipe,
        "LLaMA-Factory",
        cuts="cuts a longer example to cutoff_len",
        subsample="max_samples (each dataset's first rows)",
    )
    k = recipe.train.kernels
    if k.loss == "cce" or k.compile:
        out.append(
            Unmapped(
                "train.kernels",
                "the fused loss and compiled layers: LLaMA-Factory's are its own (enable_liger_kernel, use_unsloth)",
                "LLaMA-Factory's defaults",
            )
        )
    return out + kernels_not_carried(recipe, "LLaMA-Factory", "LLaMA-Factory's defaults")
