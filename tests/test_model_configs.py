"""A model's config.json and an adapter's adapter_config.json are foreign files, read once into typed, bounded models
(crosstune.model_configs) before any arithmetic: a negative, zero, string, boolean, float, huge or non-finite size is
one line naming the file, the key and what it holds, for `plan`, `model tiny --assistant` and the adapter readers
(export, serve), never a traceback, a "bug" line or a drafter of zero-element tensors."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.families import get_family, model_dir_spec
from crosstune.model_configs import read_adapter_config, read_model_config
from crosstune.untrusted_files import UnreadableFile
from tests.helpers.paths import RECIPES

_register()
HOSTILE_SIZES = [-1, 0, "64", 64.0, True, 10**12, None, [64], {"a": 1}]
KEYS = ["hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size"]


def _config(tmp_path, key: str, value, nested: bool = False):
    fam = get_family("gemma4")
    cfg = fam.hf_config(fam.spec("tiny"))
    if nested:  # a multimodal checkpoint keeps the decoder's keys under text_config
        cfg = {"model_type": "gemma4", "text_config": cfg}
        cfg["text_config"][key] = value
    else:
        cfg[key] = value
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


@pytest.mark.parametrize("value", HOSTILE_SIZES)
@pytest.mark.parametrize("key", KEYS)
def test_a_size_of_the_wrong_type_or_range_is_one_line_naming_the_key(tmp_path, key, value):
    if value is None:  # a key left null is as if it were missing: the family's reader names it
        return
    for nested in (False, True):
        with pytest.raises(UnreadableFile) as e:
            read_model_config(_config(tmp_path, key, value, nested))
        where = f"text_config.{key}" if nested else key
        assert str(e.value).startswith(f"{tmp_path}/config.json: {where}") and "\n" not in str(e.value)
        assert "restore it from the model's source" in str(e.value)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"layer_types": ["sliding_attention"] * 3}, "layer_types lists 3 layers, num_hidden_layers says"),
        ({"layer_types": ["bogus_attention", "full_attention"]}, "layer_types.0"),
        ({"sliding_window": float("nan")}, "sliding_window"),
        ({"final_logit_softcapping": -30.0}, "final_logit_softcapping"),
        ({"rope_parameters": {"full_attention": {"rope_theta": "1e6"}}}, "rope_parameters.full_attention.rope_theta"),
        # make fuzz, seed 1796582109: a drafter's transformers model indexed rope_parameters by layer type (KeyError)
        ({"rope_parameters": {"a": {"b": "nan"}}}, "rope_parameters.a.\\[key\\]"),
        ({"rope_parameters": {"sliding_attention": {}}}, "rope_parameters has no full_attention, which layer_types"),
        ({"top_k_experts": 9, "num_experts": 4}, "top_k_experts 9 is more than num_experts 4"),
        ({"model_type": "x" * 300}, "model_type"),
    ],
)
def test_what_the_families_read_is_checked_before_a_spec_is_made(tmp_path, change, why):
    fam = get_family("gemma4")
    cfg = {**fam.hf_config(fam.spec("tiny")), **change}
    (tmp_path / "config.json").write_text(json.dumps(cfg, allow_nan=True))
    with pytest.raises(UnreadableFile, match=why):
        model_dir_spec(tmp_path)


def test_plan_and_the_drafter_builder_refuse_a_hostile_config_in_one_line(tmp_path, tiny_gemma4_dir):
    model = tmp_path / "model"
    shutil.copytree(tiny_gemma4_dir, model)
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "hidden_size": 0}))
    recipe = tmp_path / "r.yaml"
    recipe.write_text((RECIPES / "tiny-cpu.yaml").read_text().replace("../demo-out/models/tiny-gemma4", str(model)))
    for argv in (
        ["plan", str(recipe)],
        ["model", "tiny", "--family", "gemma4", "--assistant", str(model), "--out", str(tmp_path / "d")],
    ):
        done = CliRunner().invoke(app, argv, terminal_width=400)
        assert done.exit_code == 1, done.output
        [line] = [line for line in done.output.splitlines() if line.startswith("error: ")]
        assert f"{model}/config.json: hidden_size: Input should be greater than or equal to 1 (it holds 0)" in line
        assert "a bug" not in done.output and not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"r": "16"}, "r"),
        ({"r": 0}, "r"),
        ({"r": 10**9}, "r"),
        ({"r": 16.0}, "r"),
        ({"lora_alpha": float("inf")}, "lora_alpha"),
        ({"lora_alpha": -8}, "lora_alpha"),
        ({"rank_pattern": {"q_proj": "8"}}, "rank_pattern.q_proj"),
        ({"rank_pattern": ["q_proj"]}, "rank_pattern"),
        ({"use_rslora": "yes"}, "use_rslora"),
        ({"target_modules": 5}, "target_modules"),
    ],
)
def test_an_adapter_config_of_the_wrong_type_or_range_is_one_line_naming_the_key(tmp_path, change, key):
    cfg = {"peft_type": "LORA", "r": 16, "lora_alpha": 32, "target_modules": ["q_proj"], **change}
    (tmp_path / "adapter_config.json").write_text(json.dumps(cfg, allow_nan=True))
    with pytest.raises(UnreadableFile) as e:
        read_adapter_config(tmp_path)
    assert str(e.value).startswith(f"{tmp_path}/adapter_config.json: {key}") and "\n" not in str(e.value)
