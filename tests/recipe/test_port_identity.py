"""`recipe import` takes the model's family and size from what the model is, never from a loose name match: a Gemma 3n,
a MedGemma, the Gemma 4 12B by its hub id, pre-quantized checkpoints (by name, or by a cached config.json's
quantization_config) and other Gemma lines, each imported as what it is or refused in one line naming it."""

from __future__ import annotations

import json
import shutil

import pytest

from crosstune.errors import CrosstuneError
from crosstune.families import identity
from crosstune.planner import plan_recipe
from crosstune.recipe.convert import import_config
from tests.helpers.hub_cache import put_in_hub_cache

TRL = "model_name_or_path: {model}\ndataset_name: acme/data\nuse_peft: true\nlora_target_modules: all-linear\n"
QUANTIZED_BASE = ": crosstune trains LoRA on bf16 weights, so name the bf16 checkpoint it was quantized from"


def imported(tmp_path, model: str, hardware: str | None = None):
    config = tmp_path / "trl.yaml"
    config.write_text(TRL.format(model=model))
    return import_config(config, tmp_path / "r.yaml", hardware=hardware)


def refusal(tmp_path, model: str) -> str:
    with pytest.raises(CrosstuneError) as e:
        imported(tmp_path, model)
    assert "\n" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize(
    "model, family, size",
    [
        ("google/medgemma-4b-it", "gemma3", "4b"),  # `gemma-4b` inside it is not Gemma 4
        ("google/medgemma-27b-text-it", "gemma3", "27b"),
        ("google/gemma-4-12B-it", "gemma4", "12b"),
        ("google/gemma-4-E2B-it", "gemma4", "e2b"),
        ("google/gemma-4-26B-A4B-it", "gemma4", "26b-a4b"),
        ("google/gemma-3-27b-it-qat-q4_0-unquantized", "gemma3", "27b"),  # QAT's bf16 release
        ("unsloth/gemma-3-1b-it", "gemma3", "1b"),
    ],
)
def test_a_name_gives_the_family_and_size_it_says(model, family, size, hub_cache, tmp_path):
    recipe = imported(tmp_path, model).recipe
    assert (recipe.model.family, recipe.model.size, recipe.model.path) == (family, size, f"hf://{model}")


def test_the_12b_by_hub_id_plans_on_its_own_dimensions(hub_cache, tmp_path):
    recipe = imported(tmp_path, "google/gemma-4-12B-it", "tpu-v6e-4").recipe
    plan = plan_recipe(recipe)
    assert plan.spec.name == "gemma-4-12b" and plan.blockers == []
    assert (recipe.backend.jax.mesh.fsdp, recipe.backend.jax.mesh.tp) == (1, 4)


@pytest.mark.parametrize(
    "model, said",
    [
        (
            "google/gemma-3n-E2B-it",
            "is Gemma 3n (another architecture than Gemma 3 (MatFormer, per-layer embeddings, "
            "AltUp): transformers' gemma3n, which crosstune's families do not lay out): ",
        ),
        ("google/gemma-2-9b-it", "is Gemma 2 (Gemma 2's architecture (its own softcaps and layer pattern)): "),
        ("google/gemma-7b", "is Gemma 1 (Gemma 1's architecture (no sliding-window layers)): "),
        ("google/paligemma2-3b-pt-224", "is PaliGemma (a vision-language model on Gemma 1 or 2): "),
    ],
)
def test_another_gemma_line_is_refused_naming_it(model, said, hub_cache, tmp_path):
    assert refusal(tmp_path, model) == f"model_name_or_path: {model} {said}{identity.TRAINED}"


@pytest.mark.parametrize(
    "model, evidence",
    [
        ("unsloth/gemma-3-27b-it-bnb-4bit", "Gemma 3 27B (bnb-4bit in its name)"),
        ("unsloth/gemma-4-E2B-it-unsloth-bnb-4bit", "Gemma 4 E2B (bnb-4bit in its name)"),
        ("ISTA-DASLab/gemma-3-27b-it-GPTQ-4b-128g", "Gemma 3 27B (gptq in its name)"),
        ("nvidia/Gemma-4-31B-IT-NVFP4", "Gemma 4 31B (nvfp4 in its name)"),
    ],
)
def test_a_pre_quantized_base_is_refused_by_name(model, evidence, hub_cache, tmp_path):
    said = refusal(tmp_path, model)
    assert said.startswith(f"model_name_or_path: {model} is a pre-quantized checkpoint of {evidence}{QUANTIZED_BASE}")


def test_a_cached_config_decides_over_the_name(hub_cache, tiny_gemma4_dir, tmp_path):
    quantized = tmp_path / "quantized"
    shutil.copytree(tiny_gemma4_dir, quantized)
    cfg = json.loads((quantized / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (quantized / "config.json").write_text(json.dumps(cfg))
    put_in_hub_cache(hub_cache, "acme/plain-name", quantized)
    assert refusal(tmp_path, "acme/plain-name") == (
        "model_name_or_path: acme/plain-name is a pre-quantized checkpoint of Gemma 4 (config.json's "
        f"quantization_config, quant_method 'bitsandbytes'){QUANTIZED_BASE} (QLoRA's 4-bit base maps to LoRA on that "
        "bf16 base)"
    )
    three_n = tmp_path / "three-n"
    three_n.mkdir()
    (three_n / "config.json").write_text(
        json.dumps({"model_type": "gemma3n", "text_config": {"model_type": "gemma3n_text"}})
    )
    put_in_hub_cache(hub_cache, "acme/gemma-3-4b-it", three_n)  # its name says Gemma 3 4B, its config 3n
    assert refusal(tmp_path, "acme/gemma-3-4b-it") == (
        f"model_name_or_path: acme/gemma-3-4b-it is Gemma 3n (config.json's model_type is 'gemma3n_text'): "
        f"{identity.TRAINED}"
    )
    put_in_hub_cache(hub_cache, "acme/gemma-3-27b-it", tiny_gemma4_dir)  # the config's dimensions win, said so
    port = imported(tmp_path, "acme/gemma-3-27b-it").port
    assert (port.recipe["model"]["family"], port.recipe["model"]["size"]) == ("gemma4", "tiny")
    assert (
        "model_name_or_path: acme/gemma-3-27b-it's name says Gemma 3 27B, its config.json a gemma4 tiny: the "
        "config's dimensions are used"
    ) in port.notes


@pytest.mark.parametrize(
    "model, why",
    [
        ("acme/" + "m" * 97, "is not a hub id: a hub id has at most 96 characters (this one 102)"),
        (
            "acme/gémma-3-4b",
            "is not a hub id: the hub's ids are ASCII letters, digits, '-', '_' and '.' (this one has 'é')",
        ),
    ],
)
def test_a_hub_id_the_hub_can_t_have_is_refused_by_name(model, why, hub_cache, tmp_path):
    assert why in refusal(tmp_path, model)
