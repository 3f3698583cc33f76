"""An import's global batch is the source config's (rows per device × accumulation × the devices it trained on, read
where the config says, else --source-devices, else one, said so), split over the target's data-parallel devices; on
every shipped TPU target the written recipe validates and plans, a batch the mesh can't split rounded to the nearest
multiple with a line saying from what to what and why, or set with --global-batch."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.hardware import HARDWARE
from crosstune.planner import plan_recipe
from crosstune.recipe import load_recipe
from crosstune.recipe.convert import import_config
from crosstune.recipe.porting import ImportRefused
from tests.helpers.paths import REPO

_register()
PORTS = REPO / "tests" / "fixtures" / "ports"
TPUS = sorted(n for n, hw in HARDWARE.items() if hw.chip.platform == "tpu")
# A global batch of 3 from one GPU: 3 rows per device, no accumulation
BATCH_OF_3 = """\
model_name_or_path: {model}
use_peft: true
lora_target_modules: all-linear
dataset_name: acme/verilog-chat
per_device_train_batch_size: 3
max_steps: 10
"""


def imported(tmp_path, text: str, **options):
    config = tmp_path / "trl.yaml"
    config.write_text(text)
    return import_config(config, tmp_path / "recipe.yaml", **options)


def notes_about(port, what: str) -> list[str]:
    return [n for n in port.notes if n.startswith(what)]


@pytest.mark.parametrize("target", TPUS)
@pytest.mark.parametrize("model", ["google/gemma-3-4b-it", "google/gemma-4-E4B-it", "google/gemma-4-26B-A4B-it"])
def test_every_tpu_target_gets_a_recipe_that_validates_and_plans(target, model, hub_cache, tmp_path):
    done = imported(tmp_path, BATCH_OF_3.format(model=model), hardware=target)
    recipe, mesh = done.recipe, done.recipe.backend.jax.mesh
    assert mesh.fsdp * mesh.tp == HARDWARE[target].devices
    assert recipe.train.global_batch_size % (recipe.train.per_device_batch_size * mesh.fsdp) == 0
    (tmp_path / "recipe.yaml").write_text(done.text)
    plan = plan_recipe(load_recipe(tmp_path / "recipe.yaml"))
    assert [b for b in plan.blockers if b not in plan.memory_blockers] == []
    assert notes_about(
        done.port, "train.global_batch_size 3: per_device_train_batch_size 3 × gradient_accumulation_steps 1 × 1 GPU"
    )


def test_a_batch_of_3_on_a_v5e_8_is_rounded_with_a_line_saying_why(hub_cache, tmp_path):
    done = imported(tmp_path, BATCH_OF_3.format(model="google/gemma-3-4b-it"), hardware="tpu-v5e-8")
    t, mesh = done.recipe.train, done.recipe.backend.jax.mesh
    assert ((mesh.fsdp, mesh.tp), t.global_batch_size, t.per_device_batch_size) == ((2, 4), 4, 2)
    assert notes_about(done.port, "train.global_batch_size") == [
        "train.global_batch_size 3: per_device_train_batch_size 3 × gradient_accumulation_steps 1 × 1 GPU (the config "
        "does not say how many it trained on: --source-devices N says), rows per optimizer step",
        "train.global_batch_size 4 (the config's 3, rounded to the nearest multiple of 2): tpu-v5e-8's mesh (fsdp 2 × "
        "tp 4) split each step's rows 2 ways; --global-batch N sets another multiple of 2",
    ]
    assert notes_about(done.port, "train.per_device_batch_size") == [
        "train.per_device_batch_size 2: 3 rows per device don't split 4 rows 2 ways (tpu-v5e-8's mesh (fsdp 2 × "
        "tp 4)); the backend accumulates the rest"
    ]
    assert notes_about(done.port, "backend.jax.mesh") == [
        "backend.jax.mesh fsdp 2 × tp 4 over tpu-v5e-8's 8 chips (tp 4: the widest that splits every head group of "
        "gemma-3-4b)"
    ]
    explicit = imported(
        tmp_path, BATCH_OF_3.format(model="google/gemma-3-4b-it"), hardware="tpu-v5e-8", global_batch=6
    ).recipe
    assert (explicit.train.global_batch_size, explicit.train.per_device_batch_size) == (6, 3)
    with pytest.raises(
        ImportRefused,
        match=r"--global-batch 5: tpu-v5e-8's mesh \(fsdp 2 × tp 4\) split each step's "
        r"rows 2 ways: give a multiple of 2",
    ):
        imported(tmp_path, BATCH_OF_3.format(model="google/gemma-3-4b-it"), hardware="tpu-v5e-8", global_batch=5)


def test_the_source_s_devices_come_from_where_the_config_says(hub_cache, tmp_path):
    trl = import_config(PORTS / "trl/gemma3-4b-unpacked.yaml", tmp_path / "r.yaml", hardware="8xh100")
    assert trl.recipe.train.global_batch_size == 32 and trl.recipe.backend.torch.devices == 8
    assert notes_about(trl.port, "train.global_batch_size") == [
        "train.global_batch_size 32: per_device_train_batch_size 2 × gradient_accumulation_steps 4 × 4 GPUs "
        "(num_processes in the config), rows per optimizer step"
    ]
    axolotl = import_config(PORTS / "axolotl/gemma4-31b-fsdp-recompute.yaml", tmp_path / "r.yaml", hardware="2xh100")
    assert axolotl.recipe.train.global_batch_size == 32  # 1 × 4 × dp_shard_size 8, whatever the target
    assert "× 8 GPUs (dp_shard_size 8 in the config)" in notes_about(axolotl.port, "train.global_batch_size")[0]
    deepspeed = tmp_path / "ds_z3.json"
    deepspeed.write_text(
        json.dumps(
            {
                "train_batch_size": 48,
                "train_micro_batch_size_per_gpu": 2,
                "gradient_accumulation_steps": 4,
                "zero_optimization": {"stage": 3},
            }
        )
    )
    text = BATCH_OF_3.format(model="google/gemma-3-4b-it").replace("per_device_train_batch_size: 3", "")
    done = imported(
        tmp_path,
        text + f"per_device_train_batch_size: 2\ngradient_accumulation_steps: 4\ndeepspeed: {deepspeed}\n",
        hardware="2xh100",
    )
    assert done.recipe.train.global_batch_size == 48
    assert "× 6 GPUs (deepspeed's train_batch_size ÷ (micro-batch × accumulation))" in done.port.notes[-1]
    given = imported(tmp_path, BATCH_OF_3.format(model="google/gemma-3-4b-it"), hardware="8xh100", source_devices=8)
    assert given.recipe.train.global_batch_size == 24 and given.recipe.train.accumulation(8) == 1
    assert "× 8 GPUs (--source-devices)" in notes_about(given.port, "train.global_batch_size")[0]


def test_the_cli_takes_the_batch_options_and_prints_the_derivation(hub_cache, tmp_path):
    config = tmp_path / "trl.yaml"
    config.write_text(BATCH_OF_3.format(model="google/gemma-3-4b-it"))
    out = tmp_path / "r.yaml"
    result = CliRunner().invoke(
        app,
        ["recipe", "import", str(config), "--out", str(out), "--hardware", "tpu-v5e-8", "--source-devices", "2"],
        terminal_width=400,
    )
    assert result.exit_code == 0, result.output
    assert (
        "note: train.global_batch_size 6: per_device_train_batch_size 3 × gradient_accumulation_steps 1 × 2 GPUs "
        "(--source-devices), rows per optimizer step" in result.output
    )
    assert load_recipe(out).train.global_batch_size == 6
    result = CliRunner().invoke(app, ["recipe", "import", str(config), "--out", str(out), "--global-batch", "0"])
    assert result.exit_code == 1 and "--global-batch: 0 is not a whole number >= 1" in result.output
