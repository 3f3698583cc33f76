"""`recipe export --to trl`: the torch leg as a config for `trl sft --config`, which trains it with TRL's own CLI:
TRL's key table (crosstune.recipe.porting.trl_keys) in its order, the TrainingArguments the torch backend trains with
(crosstune.recipe.training_arguments), data, model and LoRA keys besides. What a TRL config can't say is listed, one
line each (`Unmapped`); what TRL does differently by construction even then (its loss mask, packing, shuffling) is in
docs/BACKEND_EQUIVALENCE.md, "crosstune's torch leg and TRL's CLI"."""

from __future__ import annotations

from typing import Any

from crosstune.families import get_family
from crosstune.recipe.porting.exported import data_not_carried, kernels_not_carried, train_sources, whole_alpha
from crosstune.recipe.porting.named_model import model_ref
from crosstune.recipe.porting.port import Unmapped
from crosstune.recipe.porting.trl_keys import KEYS
from crosstune.recipe.porting.typed import in_table_order
from crosstune.recipe.schema import Recipe
from crosstune.recipe.training_arguments import ATTENTION, training_arguments

TABLE_BUILDERS = {"jsonl": "json", "parquet": "parquet"}  # a local file's `datasets` builder
SUFFIX_FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}


def export_trl(recipe: Recipe) -> tuple[dict[str, Any], list[Unmapped]]:
    """The torch leg as a `trl sft --config` file (a dict in TRL's key order) and what it can't carry."""
    missing: list[Unmapped] = []
    m, lora, d, t, k = recipe.model, recipe.lora, recipe.data, recipe.train, recipe.train.kernels
    world = recipe.backend.torch.devices * recipe.backend.torch.nodes
    out: dict[str, Any] = {"model_name_or_path": model_ref(recipe)}
    if m.revision:
        out["model_revision"] = m.revision
    out.update(dtype=m.dtype, attn_implementation=ATTENTION[k.attention], use_peft=True, lora_r=lora.rank)
    out["lora_alpha"] = whole_alpha(recipe, "TRL", missing)
    out["lora_dropout"] = lora.dropout
    # one regex (a one-item list is a regex to TRL): the language model's decoder layers only
    out["lora_target_modules"] = [get_family(m.family).peft_target_regex(list(lora.targets))]
    out["datasets"] = _datasets(recipe, missing)
    # padding-free rows without packing: TRL 1.16 refuses to start while max_length is set (unpacked rows are padded)
    out.update(max_length=d.max_seq_len, packing=d.packing, padding_free=d.packing)
    out.update(_mask(recipe, missing))
    out.update(training_arguments(recipe, world, on_gpu=True))
    out.update({"max_steps": t.max_steps} if t.max_steps else {"num_train_epochs": t.epochs})
    out.update(
        torch_compile=k.compile,
        logging_strategy="steps",
        save_strategy="steps",
        report_to="none",
        output_dir=f"{recipe.name}-trl",
    )
    if world > 1:
        out["num_processes"] = world  # accelerate's, passed on by TRL's CLI: one process per GPU
    if not out["fsdp"]:
        del out["fsdp"], out["fsdp_config"]
    missing += _not_carried(recipe)
    return in_table_order(out, KEYS), missing


def _datasets(recipe: Recipe, missing: list[Unmapped]) -> list[dict[str, Any]]:
    """DatasetMixtureConfig entries (`load_dataset` arguments) for the training sources."""
    out = []
    for s in train_sources(recipe, missing, "TRL's eval_dataset"):
        if s.repo is not None:
            name = {"name": s.source.config} if s.source.config else {}
            out.append({"path": s.repo, **name, "split": s.source.hub_split or "train"})
            if s.source.revision:
                missing.append(
                    Unmapped(
                        f"{s.key}.revision",
                        "TRL's dataset entries take no revision",
                        "pin the data by a commit-named copy",
                    )
                )
            continue
        p, fmt = s.path, s.source.format
        fmt = fmt if fmt != "auto" else SUFFIX_FORMATS.get(p.suffix, "hf_disk" if p.suffix == "" else "?")
        if fmt not in TABLE_BUILDERS:
            missing.append(
                Unmapped(
                    s.key, f"{s.source.path}: `load_dataset` reads no {fmt} source", "convert it to JSONL or Parquet"
                )
            )
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
        missing.append(
            Unmapped(
                "data.columns",
                "TRL's assistant_only_loss needs {% generation %} markers in the "
                "chat template: Gemma 4's has none and TRL refuses to start; Gemma 3's is swapped for "
                "TRL's training template (transformers >= 5.18)",
                "TRL's conversational prompt/completion columns (data.columns.preset prompt_completion)",
            )
        )
        return {"assistant_only_loss": True}
    missing.append(
        Unmapped(
            "data.columns",
            f"preset {preset} ({', '.join(f'{k}: {v}' for k, v in named.items() if v)})"
            ": TRL reads a `messages` column or `prompt`/`completion` columns",
            "rename the columns to TRL's, preset prompt_completion or messages",
        )
    )
    return {"completion_only_loss": True}


def _not_carried(recipe: Recipe) -> list[Unmapped]:
    out = data_not_carried(
        recipe,
        "TRL",
        cuts="truncates a longer example to max_length (its start)",
        subsample="a sliced split (train[:N])",
    )
    if recipe.train.kernels.loss == "cce":
        out.append(
            Unmapped(
                "train.kernels.loss",
                "cce: TRL's CLI has no cut-cross-entropy switch",
                "use_liger_kernel (Liger's fused linear cross-entropy)",
            )
        )
    return out + kernels_not_carried(recipe, "TRL", "TRL's defaults (full recompute, PEFT's casts, token metrics on)")
