"""LLaMA-Factory, the other common way Gemma LoRAs are trained: its LoRA SFT config imports (told from TRL's by its own
keys; `dataset:` names resolved through dataset_info.json in sharegpt, openai and alpaca layouts), another stage,
fine-tuning type or data it can't read is refused by name, and `recipe export --to llamafactory` writes a config and
its dataset_info.json that import back to the same recipe."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.errors import CrosstuneError
from crosstune.recipe import load_recipe
from crosstune.recipe.convert import export_recipe, import_config
from tests.helpers.paths import REPO

_register()
FACTORY = REPO / "tests" / "fixtures" / "ports" / "llamafactory"
ALL7 = ["q", "k", "v", "o", "gate", "up", "down"]


@pytest.fixture
def factory(tmp_path):
    """A copy of the LLaMA-Factory fixture (its config and data folder) to vary."""
    shutil.copytree(FACTORY, tmp_path / "factory")
    return tmp_path / "factory"


def with_lines(factory, *lines: str, drop: tuple[str, ...] = ()):
    config = factory / "gemma3-4b-lora.yaml"
    kept = [line for line in config.read_text().splitlines() if not line.startswith(drop)]
    config.write_text("\n".join([*kept, *lines]) + "\n")
    return config


def test_a_lora_sft_config_imports(hub_cache, tmp_path):
    done = import_config(FACTORY / "gemma3-4b-lora.yaml", tmp_path / "r.yaml", hardware="tpu-v6e-8")
    r = done.recipe
    assert done.port.tool == "llamafactory" and done.port.differences == []
    assert (r.model.family, r.model.size, r.lora.rank, r.lora.alpha, r.lora.dropout, r.lora.targets) == (
        "gemma3",
        "4b",
        16,
        32.0,
        0.0,
        ALL7,
    )
    assert r.data.sources[0].path == str(FACTORY / "data" / "verilog_chat.jsonl")
    assert r.data.columns.model_dump(exclude_none=True) == {
        "preset": "messages",
        "messages": "conversations",
        "message_role": "from",
        "message_content": "value",
    }
    assert (r.data.max_seq_len, r.data.truncation, r.data.packing) == (2048, "truncate", False)
    t = r.train
    assert (t.learning_rate, t.schedule, t.warmup_ratio, t.epochs, t.precision, t.gradient_checkpointing) == (
        1e-4,
        "cosine",
        0.1,
        3.0,
        "bf16",
        True,
    )
    assert (t.global_batch_size, t.log_every, t.checkpoint_every, r.backend.jax.mesh.tp) == (8, 10, 500, 4)
    assert "lora.alpha 32: no lora_alpha, so LLaMA-Factory's default, 2 × lora_rank" in done.port.notes


def test_the_alpaca_and_openai_layouts_map_to_columns(hub_cache, factory, tmp_path):
    alpaca = import_config(with_lines(factory, "dataset: verilog_alpaca", drop=("dataset:",)), tmp_path / "r.yaml")
    assert alpaca.recipe.data.columns.model_dump(exclude_none=True) == {
        "preset": "custom",
        "system": "system",
        "prompt": "instruction",
        "response": "output",
    }
    assert [u.render() for u in alpaca.port.differences] == [
        "not mapped: dataset: verilog_alpaca: columns.query: input is a column of the data: LLaMA-Factory appends it "
        "to the instruction (instruction + newline + input); crosstune reads one prompt column (nearest: a copy of the "
        "data with the input joined to the instruction)"
    ]
    openai = import_config(with_lines(factory, "dataset: verilog_openai", drop=("dataset:",)), tmp_path / "r.yaml")
    assert openai.recipe.data.columns.model_dump(exclude_none=True) == {"preset": "messages"}


@pytest.mark.parametrize(
    "lines, drop, said",
    [
        (["stage: dpo"], ("stage:",), "stage dpo: crosstune trains supervised fine-tuning (stage: sft)"),
        (["finetuning_type: full"], ("finetuning_type:",), "finetuning_type full (not LoRA): crosstune trains LoRA"),
        (
            ["dataset: identity"],
            ("dataset:",),
            "dataset: identity: FACTORY/data/identity.json is a JSON array; "
            "crosstune reads JSON Lines (one record per line): convert it, e.g. "
            "`jq -c '.[]' FACTORY/data/identity.json > FACTORY/data/identity.jsonl`",
        ),
        (["dataset: nowhere"], ("dataset:",), "dataset: nowhere: not defined in FACTORY/data/dataset_info.json"),
        (
            ["dataset_dir: elsewhere"],
            ("dataset_dir:",),
            "dataset: verilog_chat: no FACTORY/elsewhere/"
            "dataset_info.json (dataset_dir 'elsewhere', read against "
            "the config's folder",
        ),
        (
            ["model_name_or_path: google/gemma-3n-E4B-it"],
            ("model_name_or_path:",),
            "model_name_or_path: google/gemma-3n-E4B-it is Gemma 3n",
        ),
    ],
)
def test_what_crosstune_can_t_train_is_refused_by_name(lines, drop, said, hub_cache, factory, tmp_path):
    with pytest.raises(CrosstuneError) as e:
        import_config(with_lines(factory, *lines, drop=drop), tmp_path / "r.yaml")
    assert said in str(e.value).replace(str(factory), "FACTORY") and "\n" not in str(e.value)


def test_the_gemma4_template_s_thinking_system_turn_is_named(hub_cache, factory, tmp_path):
    config = with_lines(
        factory,
        "model_name_or_path: google/gemma-4-E2B-it",
        "template: gemma4",
        "packing: true",
        drop=("model_name_or_path:", "template:"),
    )
    done = import_config(config, tmp_path / "r.yaml")
    assert [u.key for u in done.port.differences] == ["template", "packing"]
    assert done.port.differences[0].reason.startswith(
        "LLaMA-Factory's gemma4 template opens every example with a system turn that switches thinking on (<|think|>)"
    )


ROUND_TRIP = """\
name: port
description: Imported from port.yaml (llamafactory)
model: {family: gemma4, path: @MODEL@, size: tiny, dtype: bfloat16}
lora: {rank: 8, alpha: 16.0, dropout: 0.05, targets: [q, k, v, o]}
data:
  sources: [{path: @DATA@}, {path: "hf://acme/verilog-chat", config: codev, hub_split: "train[:10%]"}]
  columns: {preset: messages}
  reasoning: keep_inline
  max_seq_len: 1024
  truncation: truncate
  packing: true
train:
  max_steps: 40
  learning_rate: 2.0e-4
  schedule: linear
  warmup_ratio: 0.1
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
backend: {default: torch, torch: {devices: 1}}
hardware: 1xh100
"""


def test_import_of_an_export_gives_the_recipe_back(hub_cache, tiny_gemma4_dir, tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    recipe_file = tmp_path / "port.yaml"
    recipe_file.write_text(ROUND_TRIP.replace("@MODEL@", str(tiny_gemma4_dir.resolve())).replace("@DATA@", str(data)))
    out = tmp_path / "llamafactory" / "port.yaml"
    result = CliRunner().invoke(
        app, ["recipe", "export", str(recipe_file), "--to", "llamafactory", "--out", str(out)], terminal_width=400
    )
    assert result.exit_code == 0, result.output
    info_file = tmp_path / "llamafactory" / "port-data" / "dataset_info.json"
    assert f"wrote {out} and {info_file}: the torch leg of {recipe_file} for llamafactory" in result.output
    info = json.loads(info_file.read_text())
    assert info == {
        "crosstune_port_0": {
            "file_name": str(data),
            "formatting": "sharegpt",
            "columns": {"messages": "messages"},
            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
        },
        "crosstune_port_1": {
            "hf_hub_url": "acme/verilog-chat",
            "subset": "codev",
            "split": "train[:10%]",
            "formatting": "sharegpt",
            "columns": {"messages": "messages"},
            "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"},
        },
    }
    back = import_config(out, tmp_path / "back" / "port.yaml", hardware="1xh100")
    # the one difference both directions name: LLaMA-Factory's gemma4 template (a thinking system turn)
    assert back.port.tool == "llamafactory" and [u.key for u in back.port.differences] == ["template"]
    assert "# not mapped: template: LLaMA-Factory's gemma4 template opens every example" in out.read_text()
    assert back.recipe.model_dump() == load_recipe(recipe_file).model_dump()
    # the folder beside it is the export's own by its manifest (each file's sha256): replaced when unchanged, and
    # refused, before either file is written, once a file in it is edited or not the export's
    export = ["recipe", "export", str(recipe_file), "--to", "llamafactory", "--out", str(out)]
    assert CliRunner().invoke(app, export).exit_code == 0
    config = out.read_text()
    info_file.write_text('{"mine": {"file_name": "x.json"}}')
    again = CliRunner().invoke(app, export, terminal_width=400)
    assert again.exit_code == 1 and "dataset_info.json (changed since crosstune recipe export wrote it)" in again.output
    assert info_file.read_text() == '{"mine": {"file_name": "x.json"}}' and out.read_text() == config
    info_file.unlink()
    (info_file.parent / "notes.txt").write_text("mine")
    again = CliRunner().invoke(app, export, terminal_width=400)
    assert again.exit_code == 1 and "notes.txt (not in its crosstune_export.json)" in again.output
    assert (info_file.parent / "notes.txt").read_text() == "mine"
    with pytest.raises(CrosstuneError, match="--to llamafactory writes two files"):
        export_recipe(recipe_file, "llamafactory")
