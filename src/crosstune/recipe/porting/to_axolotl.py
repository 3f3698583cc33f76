"""`recipe export --to axolotl`: the torch leg as an Axolotl YAML, Axolotl's key table
(crosstune.recipe.porting.axolotl_keys) in its order; what Axolotl can't say listed one line each. `recipe import` of
the file gives the recipe back (tests/recipe/test_port_round_trip.py)."""

from __future__ import annotations

from typing import Any

from crosstune.families import get_family
from crosstune.recipe.porting.axolotl_keys import CCE_PLUGIN, KEYS
from crosstune.recipe.porting.exported import data_not_carried, kernels_not_carried, train_sources, whole_alpha
from crosstune.recipe.porting.named_model import model_ref
from crosstune.recipe.porting.port import Unmapped
from crosstune.recipe.porting.typed import in_table_order
from crosstune.recipe.schema import Recipe
from crosstune.recipe.training_arguments import ATTENTION, SCHEDULES, recipe_value, training_arguments

LOCAL_TYPES = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def export_axolotl(recipe: Recipe) -> tuple[dict[str, Any], list[Unmapped]]:
    """The torch leg as an Axolotl config (a dict in the order its docs list the keys) and what it can't carry."""
    missing: list[Unmapped] = []
    m, lora, d, t, k = recipe.model, recipe.lora, recipe.data, recipe.train, recipe.train.kernels
    family = get_family(m.family)
    world = recipe.backend.torch.devices * recipe.backend.torch.nodes
    shared = training_arguments(recipe, world, on_gpu=True)
    out: dict[str, Any] = {row.name: recipe_value(recipe, row.recipe) for row in KEYS.values() if row.recipe}
    out.update(base_model=model_ref(recipe), adapter="lora", lora_alpha=whole_alpha(recipe, "Axolotl", missing))
    if m.revision:
        out["revision_of_model"] = m.revision
    out["lora_target_modules"] = family.peft_target_regex(list(lora.targets))  # a string: one regex
    out.update(chat_template="tokenizer_default", eot_tokens=[family.chat.turn_end])
    out["datasets"] = _datasets(recipe, missing)
    out.update(excess_length_strategy=d.truncation, train_on_inputs=False)
    out.update(micro_batch_size=t.per_device_batch_size, gradient_accumulation_steps=t.accumulation(world))
    out.update({"max_steps": t.max_steps} if t.max_steps else {"num_epochs": t.epochs})
    out.update(lr_scheduler=SCHEDULES[t.schedule], optimizer="adamw_torch_fused", max_grad_norm=shared["max_grad_norm"])
    if t.warmup_ratio is not None:
        out["warmup_ratio"] = t.warmup_ratio
        missing.append(
            Unmapped(
                "train.warmup_ratio",
                f"{t.warmup_ratio:g}: Axolotl warms up int(ratio × steps) steps, crosstune ceil(ratio × steps)",
                "one warm-up step fewer at most",
            )
        )
    else:
        out["warmup_steps"] = t.warmup_steps
    out.update(
        bf16=shared["bf16"], gradient_checkpointing=t.gradient_checkpointing, attn_implementation=ATTENTION[k.attention]
    )
    if k.loss == "cce":
        out.update(plugins=[CCE_PLUGIN], cut_cross_entropy=True)
    if shared["fsdp"]:
        out.update(fsdp_version=2, fsdp_config={key: v for key, v in shared["fsdp_config"].items() if key != "version"})
        out["dp_shard_size"] = world  # FSDP's shards: the GPUs the global batch is split over
    elif world > 1:
        missing.append(
            Unmapped(
                "backend.torch.devices",
                f"{world} GPUs without FSDP: Axolotl takes them from its launch",
                f"accelerate launch --num_processes {world} -m axolotl.cli.train FILE",
            )
        )
    out.update(logging_steps=t.log_every, save_steps=t.checkpoint_every, output_dir=f"./outputs/{recipe.name}")
    if d.columns.preset != "messages":
        missing.append(
            Unmapped(
                "data.columns",
                f"preset {d.columns.preset}: Axolotl's chat_template datasets read a list of messages",
                "data in a messages column (preset messages)",
            )
        )
    missing += data_not_carried(recipe, "Axolotl", cuts=None, subsample="a sliced split")
    missing += kernels_not_carried(recipe, "Axolotl", "Axolotl's defaults")
    return in_table_order(out, KEYS), missing


def _datasets(recipe: Recipe, missing: list[Unmapped]) -> list[dict[str, Any]]:
    cols = recipe.data.columns
    role, content = cols.message_keys
    base = {
        "type": "chat_template",
        "field_messages": cols.resolved()["messages"] or "messages",
        "message_property_mappings": {"role": role, "content": content},
        "roles_to_train": ["assistant"],
        "train_on_eos": "turn",
    }
    out = []
    for s in train_sources(recipe, missing, "Axolotl's test_datasets"):
        src = s.source
        if s.repo is not None:
            entry: dict[str, Any] = {"path": s.repo, **({"name": src.config} if src.config else {})}
            entry.update({"split": src.hub_split} if src.hub_split else {})
            entry.update({"revision": src.revision} if src.revision else {})
            out.append({**entry, **base})
            continue
        fmt = {"jsonl": ".jsonl", "parquet": ".parquet"}.get(src.format, s.path.suffix)
        if fmt not in LOCAL_TYPES:
            missing.append(
                Unmapped(
                    s.key, f"{src.path}: Axolotl reads JSON(L) or Parquet files here", "convert it to JSONL or Parquet"
                )
            )
            continue
        out.append({"path": str(s.path), "ds_type": LOCAL_TYPES[fmt], **base})
    return out
