"""`recipe export --to axolotl`: the torch leg as an Axolotl YAML (its documented keys), what it can't carry listed
one line each. `recipe import` of the file gives the recipe back (tests/recipe/test_port_round_trip.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crosstune.families import get_family
from crosstune.recipe.from_axolotl import CCE_PLUGIN
from crosstune.recipe.hub_ids import hub_dataset_id
from crosstune.recipe.porting import Unmapped, model_ref
from crosstune.recipe.schema import Recipe
from crosstune.recipe.trl_format import ATTENTION, training_arguments

SCHEDULES = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}
LOCAL_TYPES = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def export_axolotl(recipe: Recipe) -> tuple[dict[str, Any], list[Unmapped]]:
    """The torch leg as an Axolotl config (a dict in the order its docs list the keys) and what it can't carry."""
    missing: list[Unmapped] = []
    m, lora, d, t, k = recipe.model, recipe.lora, recipe.data, recipe.train, recipe.train.kernels
    family = get_family(m.family)
    world = recipe.backend.torch.devices * recipe.backend.torch.nodes
    shared = training_arguments(recipe, world, on_gpu=True)
    out: dict[str, Any] = {"base_model": model_ref(recipe)}
    if m.revision:
        out["revision_of_model"] = m.revision
    out.update(adapter="lora", lora_r=lora.rank, lora_alpha=round(lora.alpha), lora_dropout=lora.dropout)
    if lora.alpha != round(lora.alpha):
        missing.append(Unmapped("lora.alpha", f"Axolotl's lora_alpha is a whole number, {lora.alpha:g} is not",
                                f"lora_alpha {round(lora.alpha)}"))  # fmt: skip
    out["lora_target_modules"] = family.peft_target_regex(list(lora.targets))  # a string: one regex
    out.update(chat_template="tokenizer_default", eot_tokens=[family.chat.turn_end])
    out["datasets"] = _datasets(recipe, missing)
    out.update(sequence_len=d.max_seq_len, sample_packing=d.packing, excess_length_strategy=d.truncation)
    out["train_on_inputs"] = False
    out.update(micro_batch_size=t.per_device_batch_size, gradient_accumulation_steps=t.accumulation(world))
    out.update({"max_steps": t.max_steps} if t.max_steps else {"num_epochs": t.epochs})
    out.update(learning_rate=t.learning_rate, lr_scheduler=SCHEDULES[t.schedule], warmup_steps=t.warmup_steps,
               weight_decay=t.weight_decay, optimizer="adamw_torch_fused", adam_beta1=t.adam_beta1,
               adam_beta2=t.adam_beta2, adam_epsilon=t.adam_eps, max_grad_norm=t.max_grad_norm or 0.0)  # fmt: skip
    out.update(bf16=shared["bf16"], gradient_checkpointing=t.gradient_checkpointing,
               attn_implementation=ATTENTION[k.attention], torch_compile=k.compile)  # fmt: skip
    if k.loss == "cce":
        out.update(plugins=[CCE_PLUGIN], cut_cross_entropy=True)
    if shared["fsdp"]:
        out.update(fsdp_version=2, fsdp_config={key: v for key, v in shared["fsdp_config"].items() if key != "version"})
    out.update(seed=t.seed, logging_steps=t.log_every, save_steps=t.checkpoint_every, save_total_limit=t.keep_last,
               output_dir=f"./outputs/{recipe.name}")  # fmt: skip
    if d.columns.preset != "messages":
        missing.append(Unmapped("data.columns", f"preset {d.columns.preset}: Axolotl's chat_template datasets read a "
                                "list of messages", "data in a messages column (preset messages)"))  # fmt: skip
    if d.system_prompt.policy != "keep":
        missing.append(Unmapped("data.system_prompt", f"policy {d.system_prompt.policy}: Axolotl trains the data's "
                                "system prompt as written", "rewrite the data"))  # fmt: skip
    if d.reasoning != "keep_inline":
        missing.append(Unmapped("data.reasoning", f"{d.reasoning}: crosstune rewrites the reasoning in assistant "
                                "text; Axolotl trains it as written", "data.reasoning keep_inline"))  # fmt: skip
    if d.subsample is not None:
        missing.append(Unmapped("data.subsample", "Axolotl reads every record of the split", "a sliced split"))
    if k.recompute == "selective" or not k.lora_input_cast or not k.token_metrics and k.loss != "cce":
        missing.append(Unmapped("train.kernels", "recompute selective, lora_input_cast and token_metrics are "
                                "crosstune's switches around TRL's trainer", "Axolotl's defaults"))  # fmt: skip
    return out, missing


def _datasets(recipe: Recipe, missing: list[Unmapped]) -> list[dict[str, Any]]:
    cols = recipe.data.columns
    role, content = cols.message_keys
    base = {"type": "chat_template", "field_messages": cols.resolved()["messages"] or "messages",
            "message_property_mappings": {"role": role, "content": content}, "roles_to_train": ["assistant"],
            "train_on_eos": "turn"}  # fmt: skip
    out = []
    for i, src in enumerate(recipe.data.sources):
        key = f"data.sources[{i}]"
        if src.split != "train":
            missing.append(Unmapped(key, "an eval source: the export trains only", "Axolotl's test_datasets"))
            continue
        if (repo := hub_dataset_id(src, recipe.base_dir)) is not None:
            entry: dict[str, Any] = {"path": repo, **({"name": src.config} if src.config else {})}
            entry.update({"split": src.hub_split} if src.hub_split else {})
            entry.update({"revision": src.revision} if src.revision else {})
            out.append({**entry, **base})
            continue
        p = Path(src.path).expanduser()
        p = p if p.is_absolute() or recipe.base_dir is None else (recipe.base_dir / p).resolve()
        fmt = {"jsonl": ".jsonl", "parquet": ".parquet"}.get(src.format, p.suffix)
        if fmt not in LOCAL_TYPES:
            missing.append(Unmapped(key, f"{src.path}: Axolotl reads JSON(L) or Parquet files here",
                                    "convert it to JSONL or Parquet"))  # fmt: skip
            continue
        out.append({"path": str(p), "ds_type": LOCAL_TYPES[fmt], **base})
    return out
