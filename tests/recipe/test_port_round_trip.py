"""`crosstune recipe export` and `recipe import` are inverses: a recipe exported to TRL's or Axolotl's config imports
back to the same recipe (every section the tools carry: model, LoRA, data, training, torch backend, hardware); the
exported TRL config is one TRL's own parser accepts key by key; the TRL defaults the import fills in are TRL's."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from crosstune.recipe import load_recipe
from crosstune.recipe.convert import export_recipe, import_config
from crosstune.recipe.porting.trl_keys import KEYS as TRL_KEYS

TRAIN = """\
train:
  max_steps: 40
  learning_rate: 2.0e-4
  schedule: {schedule}
  warmup_steps: 3
  weight_decay: 0.01
  adam_beta2: 0.99
  max_grad_norm: 0.5
  per_device_batch_size: 2
  global_batch_size: 8
  gradient_checkpointing: true
  precision: bf16
  log_every: 5
  checkpoint_every: 20
  keep_last: 2
  seed: 7
  kernels: {kernels}
backend: {{default: torch, torch: {{devices: 2, fsdp: true}}}}
hardware: 2xh100
"""
RECIPES = {
    "trl": """\
name: port
description: Imported from port.yaml (trl)
model: {family: gemma4, path: @MODEL@, size: tiny, dtype: bfloat16}
lora: {rank: 8, alpha: 16.0, dropout: 0.05, targets: [q, k, v, o, gate, up, down]}
data:
  sources: [{path: @DATA@}, {path: "hf://acme/verilog-sft", config: codev, hub_split: "train[:10%]"}]
  columns: {preset: prompt_completion}
  reasoning: keep_inline
  max_seq_len: 1024
  truncation: truncate
  packing: true
"""
    + TRAIN.format(schedule="linear", kernels="{attention: eager, compile: true}"),
    "axolotl": """\
name: port
description: Imported from port.yaml (axolotl)
model: {family: gemma4, path: @MODEL@, size: tiny, dtype: bfloat16}
lora: {rank: 16, alpha: 32.0, dropout: 0.0, targets: [q, k, v, o]}
data:
  sources:
    - {path: @DATA@}
    - {path: "hf://acme/verilog-chat", config: codev, hub_split: "train[:10%]", revision: v2}
  columns: {preset: messages, messages: conversations, message_role: from, message_content: value}
  reasoning: keep_inline
  max_seq_len: 2048
  truncation: drop
  packing: true
"""
    + TRAIN.format(schedule="constant", kernels="{attention: flex, loss: cce, token_metrics: false}"),
}


def port_recipe(tool: str, model, data) -> str:
    return RECIPES[tool].replace("@MODEL@", str(model.resolve())).replace("@DATA@", str(data))


@pytest.mark.parametrize("tool", sorted(RECIPES))
def test_import_of_an_export_gives_the_recipe_back(tool, hub_cache, tiny_gemma4_dir, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("{}\n")
    recipe_file = tmp_path / "port.yaml"
    recipe_file.write_text(port_recipe(tool, tiny_gemma4_dir, data))
    original = load_recipe(recipe_file)
    text, missing, _ = export_recipe(recipe_file, tool)
    assert missing == [], [u.render() for u in missing]  # a recipe of portable settings carries whole
    exported = tmp_path / tool / "port.yaml"
    exported.parent.mkdir()
    exported.write_text(text)
    back = import_config(exported, tmp_path / "back" / "port.yaml", hardware="2xh100")
    assert back.port.differences == []
    assert back.recipe.model_dump() == original.model_dump()


def test_what_a_tool_can_t_say_is_listed(tmp_path):
    from tests.helpers.paths import RECIPES as SHIPPED

    text, missing, _ = export_recipe(SHIPPED / "gemma4-31b-tpu-v5p-8.yaml", "trl")
    assert [u.key for u in missing] == ["data.columns", "data.reasoning", "data.truncation", "data.subsample"]
    assert text.splitlines()[0].startswith("# crosstune recipe export: the torch leg of ")
    assert (
        "# not mapped: data.columns: preset codev_r1 (system: system, prompt: prompt, response: response): TRL "
        "reads a `messages` column or `prompt`/`completion` columns" in text
    )


def test_the_exported_trl_config_is_one_trl_s_parser_accepts(tmp_path, tiny_gemma4_dir):
    pytest.importorskip("trl")
    from trl.scripts.sft import make_parser

    recipe_file = tmp_path / "port.yaml"
    data = tmp_path / "data.jsonl"
    data.write_text("{}\n")
    recipe_file.write_text(port_recipe("trl", tiny_gemma4_dir, data))
    config = tmp_path / "trl.yaml"
    config.write_text(export_recipe(recipe_file, "trl", ["train.precision=fp32"])[0])  # no GPU here for bf16
    # every key is one of TRL's own, with the value TRL reads back, but accelerate's num_processes, which TRL's CLI
    # passes on to its launch
    script, training, model, mixture, launch = make_parser().parse_args_and_config(
        ["--config", str(config)], return_remaining_strings=True
    )
    assert launch == ["--num_processes", "2"]
    written = yaml.safe_load(config.read_text())
    assert (model.lora_r, model.lora_alpha, model.dtype) == (8, 16, "bfloat16")
    assert model.lora_target_modules == written["lora_target_modules"][0]  # a one-item list: one regex to TRL
    assert (training.learning_rate, training.max_steps, training.gradient_accumulation_steps) == (2e-4, 40, 2)
    assert training.fsdp_config["activation_checkpointing"] and not training.gradient_checkpointing
    assert [d.path for d in mixture.datasets] == ["json", "acme/verilog-sft"]
    assert (mixture.datasets[1].name, mixture.datasets[1].split) == ("codev", "train[:10%]")


def test_the_trl_defaults_the_import_assumes_are_trl_s():
    """Every row of TRL's key table that is a field of TRL's dataclasses (not an accelerate launch argument, not an
    older name) has TRL's default."""
    pytest.importorskip("trl")
    from trl import ModelConfig, ScriptArguments, SFTConfig

    fields = {f.name: f for cls in (SFTConfig, ModelConfig, ScriptArguments) for f in dataclasses.fields(cls)}
    defaults = {
        k: f.default if f.default is not dataclasses.MISSING else f.default_factory() for k, f in fields.items()
    }
    rows = {k: row.default for k, row in TRL_KEYS.items() if k in fields and not row.ignored}
    assert {k: defaults[k] for k in rows} == rows
    others = {k for k, row in TRL_KEYS.items() if k not in fields and not row.alias_of and not row.ignored}
    assert len(rows) > 50 and others == {"num_processes", "accelerate_config", "datasets"}
