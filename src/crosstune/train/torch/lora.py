"""PEFT LoRA on the torch side: the recipe's neutral targets as a LoraConfig (checked against the family's layout),
and crosstune's LoraWeights (PEFT layout) read from and installed into a PEFT model."""

from __future__ import annotations

import os
import re
from typing import Any

from rich.console import Console

from crosstune.families import get_family
from crosstune.families.base import HF_TARGET_MODULES
from crosstune.families.spec import ModelSpec
from crosstune.recipe import Recipe
from crosstune.run.lora_weights import text_module_name
from crosstune.run.records import LoraLayout, lora_layout
from crosstune.train.lora_init import initial_lora

console = Console(soft_wrap=True, highlight=False, markup=False)


def lora_config(recipe: Recipe, model: Any, spec: ModelSpec | None = None) -> tuple[Any, LoraLayout]:
    """PEFT LoraConfig for the recipe's neutral targets and the layout it will produce (run.json's lora.layout).

    Gemma 4 global layers reuse keys as values (k_eq_v) and have no v_proj: a `v` target adapts the sliding
    layers only. The layout comes from the model's own modules and is checked against the family's spec (`spec`,
    or the model's config when None)."""
    from peft import LoraConfig

    family = get_family(recipe.model.family)
    targets = list(recipe.lora.targets)
    regex = family.peft_target_regex(targets)
    found: dict[int, set[str]] = {}
    pattern = re.compile(regex)
    leaf_to_target = {v: k for k, v in HF_TARGET_MODULES.items()}
    for name, _ in model.named_modules():
        if pattern.match(name):
            layer, leaf = re.search(r"layers\.(\d+)\.(.+)$", name).groups()
            found.setdefault(int(layer), set()).add(leaf_to_target[leaf])
    spec = spec or family.spec_from_hf_config(model.config.to_dict())
    expected = {i: set(spec.targets_present(i, targets)) for i in range(spec.num_layers)}
    if found != expected:
        raise RuntimeError(f"LoRA targets differ from the {family.name} spec: modules {found} vs spec {expected}")
    layout = lora_layout(spec, targets, recipe.lora.rank)
    if int(os.environ.get("RANK", "0")) == 0:
        console.print(
            f"[lora] r={recipe.lora.rank} alpha={recipe.lora.alpha} on {layout.modules} modules: "
            f"{layout.targets_by_layer_type}"
        )
        for note in layout.notes:
            console.print(f"[lora] {note}")
    config = LoraConfig(
        r=recipe.lora.rank,
        lora_alpha=recipe.lora.alpha,
        lora_dropout=recipe.lora.dropout,
        target_modules=regex,
        bias="none",
        task_type="CAUSAL_LM",
    )
    return config, layout


def peft_lora_params(model: Any) -> dict[tuple[str, str], Any]:
    """{(HF module name in the text-only layout, "A" | "B"): the PEFT parameter} of a PEFT-wrapped model."""

    params = {}
    for name, p in model.named_parameters():
        if ".lora_A." in name or ".lora_B." in name:
            module, part = name.split(".lora_")
            params[(text_module_name(module.removeprefix("base_model.model.")), part[0])] = p
    return params


def install_lora_weights(model: Any, lora: Any) -> None:
    """Copy `lora` (crosstune.run.lora_weights.LoraWeights) into the PEFT model's lora_A/lora_B, which must cover
    exactly the same modules."""
    import torch

    params = peft_lora_params(model)
    wanted = {(m, part) for m in lora.modules for part in "AB"}
    if set(params) != wanted:
        raise RuntimeError(
            "the PEFT model's LoRA modules differ from the LoRA to install: model only "
            f"{sorted(set(params) - wanted)[:3]}, LoRA only {sorted(wanted - set(params))[:3]} (family layout mismatch)"
        )
    with torch.no_grad():
        for (module, part), p in params.items():
            p.copy_(torch.from_numpy(lora.modules[module][0 if part == "A" else 1]))


def install_initial_lora(model: Any, recipe: Recipe, spec: ModelSpec | None = None) -> None:
    """The run's initial LoRA from crosstune.train.lora_init (the JAX backend installs the same arrays), in place of
    PEFT's own draw: the two backends start bit for bit from the same adapter (`spec`: the base's shapes, or the
    model's config when None)."""

    spec = spec or get_family(recipe.model.family).spec_from_hf_config(model.get_base_model().config.to_dict())
    lora = recipe.lora
    install_lora_weights(model, initial_lora(spec, lora.rank, lora.alpha, lora.targets, recipe.train.seed))
