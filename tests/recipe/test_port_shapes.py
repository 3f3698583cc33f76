"""Shapes of real configs the import once dropped or mis-read, each now carried or named up front: a warm-up ratio
(carried by both backends and written by every export), FSDP's own recompute and parameter offload, a vision config
(named; --strict refuses it), TRL's pre-1.0 names, a held-out split; and an export of an imported recipe restates what
the import did not carry, so a user exporting back to the tool they trust sees where the run differs."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.recipe.convert import export_recipe, import_config
from tests.helpers.paths import REPO

_register()
PORTS = REPO / "tests" / "fixtures" / "ports"


def test_a_warm_up_ratio_is_carried_and_every_export_writes_it(hub_cache, tmp_path):
    done = import_config(PORTS / "trl/gemma3-4b-unpacked.yaml", tmp_path / "r.yaml", hardware="8xh100")
    assert (done.recipe.train.warmup_ratio, done.recipe.train.warmup_steps) == (0.05, 0)
    (tmp_path / "r.yaml").write_text(done.text)
    trl = yaml.safe_load(export_recipe(tmp_path / "r.yaml", "trl")[0])
    axolotl = yaml.safe_load(export_recipe(tmp_path / "r.yaml", "axolotl")[0])
    factory = yaml.safe_load(export_recipe(tmp_path / "r.yaml", "llamafactory", out=tmp_path / "lf.yaml")[0])
    assert (trl["warmup_steps"], axolotl["warmup_ratio"], factory["warmup_ratio"]) == (0.05, 0.05, 0.05)
    assert "warmup_steps" not in axolotl and "warmup_steps" not in factory


def test_transformers_constant_schedule_warms_up_not_at_all(hub_cache, tmp_path):
    config = tmp_path / "trl.yaml"
    config.write_text(
        "model_name_or_path: google/gemma-3-4b-it\nuse_peft: true\ndataset_name: acme/d\n"
        "lr_scheduler_type: constant\nwarmup_steps: 50\n"
    )
    done = import_config(config, tmp_path / "r.yaml")
    assert (done.recipe.train.schedule, done.recipe.train.warmup_steps) == ("constant", 0)
    assert (
        "train.warmup_steps 0: constant is transformers' schedule without a warm-up, so the file's warmup_steps "
        "is not applied by its tool either"
    ) in done.port.notes


def test_fsdp_s_own_recompute_is_carried_and_its_offload_named(hub_cache, tmp_path):
    done = import_config(PORTS / "axolotl/gemma4-31b-fsdp-recompute.yaml", tmp_path / "r.yaml", hardware="8xh100")
    assert (done.recipe.train.gradient_checkpointing, done.recipe.backend.torch.fsdp) == (True, True)
    assert [u.render() for u in done.port.differences] == [
        "not mapped: fsdp_config.offload_params: parameters offloaded to host memory between uses (nearest: "
        "backend.torch.fsdp (sharded over the GPUs, kept on them))"
    ]
    assert (
        "train.gradient_checkpointing true: fsdp_config.activation_checkpointing recomputes each decoder layer "
        "(FSDP's own recompute)"
    ) in done.port.notes


def test_a_vision_config_is_named_up_front_and_strict_refuses_it(hub_cache, tmp_path):
    vision = PORTS / "axolotl/gemma3-4b-vision.yaml"
    done = import_config(vision, tmp_path / "r.yaml", hardware="tpu-v5e-8")
    assert [u.render() for u in done.port.differences] == [
        f"not mapped: {key}: a vision or audio setting: crosstune trains text: images, audio and video are not read "
        "(nearest: a text-only config of the same model)"
        for key in ("processor_type", "freeze_mm_modules")
    ]
    out = tmp_path / "strict.yaml"
    result = CliRunner().invoke(app, ["recipe", "import", str(vision), "--out", str(out), "--strict"])
    assert result.exit_code == 1 and not out.exists()
    # a TRL config says it by its data: the first record's images column
    data = tmp_path / "llava.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "what is it?"}], "images": ["cat.png"]}\n')
    config = tmp_path / "trl.yaml"
    config.write_text(f"model_name_or_path: google/gemma-3-4b-it\nuse_peft: true\ndataset_name: {data}\n")
    said = [u.render() for u in import_config(config, tmp_path / "r.yaml").port.differences]
    assert (
        "not mapped: dataset_name: the data has images columns: crosstune trains text: images, audio and video are "
        "not read (nearest: a text-only copy of the data)"
    ) in said


def test_trl_s_pre_1_0_names_are_read_as_the_keys_they_became(hub_cache, tmp_path):
    done = import_config(PORTS / "trl/gemma3-4b-unpacked.yaml", tmp_path / "r.yaml")
    assert (done.recipe.model.dtype, done.recipe.data.max_seq_len, done.recipe.data.packing) == (
        "bfloat16",
        2048,
        False,
    )
    assert [n for n in done.port.notes if "older name" in n] == [
        "torch_dtype: the older name of dtype, read as dtype",
        "max_seq_length: the older name of max_length, read as max_length",
        "evaluation_strategy: the older name of eval_strategy, read as eval_strategy",
    ]
    assert [u.key for u in done.port.unmapped if u.ignored] == ["eval_strategy", "output_dir"]


def test_a_held_out_split_is_named_for_what_it_is(hub_cache, tmp_path):
    done = import_config(PORTS / "axolotl/gemma4-31b-qlora.yaml", tmp_path / "r.yaml")
    (line,) = [u.render() for u in done.port.differences if u.key == "val_set_size"]
    assert line == (
        "not mapped: val_set_size: a held-out split: Axolotl trains on the rest of the data, 5% of the rows "
        "set aside for its evaluation; crosstune trains on every row (nearest: data.subsample (a smaller "
        "training set))"
    )


@pytest.mark.parametrize("to", ["trl", "axolotl"])
def test_an_export_restates_what_the_import_did_not_carry(to, hub_cache, tmp_path):
    """QLoRA's 4-bit base, the 8-bit optimizer, Liger, the held-out split: dropped by the import, said again at the
    head of the exported config (and on the screen), so its user knows the run differs from the config they trust."""
    source = PORTS / "axolotl/gemma4-31b-qlora.yaml"
    recipe = tmp_path / "gemma4-31b.yaml"
    result = CliRunner().invoke(app, ["recipe", "import", str(source), "--out", str(recipe)])
    assert result.exit_code == 0, result.output
    text, missing, _ = export_recipe(recipe, to)
    dropped = [u for u in missing if u.key == f"the import of {source} (axolotl)"]
    assert [u.reason.split(":")[0] for u in dropped] == [
        "adapter",
        "optim_args",
        "val_set_size",
        "optimizer",
        "activation_offloading",
        "tf32",
        "attn_implementation",
        "gemma4_hybrid_attn_impl",
        "liger_glu_activation, liger_layer_norm, liger_rms_norm",
    ]
    assert f"# not mapped: the import of {source} (axolotl): optimizer: adamw_torch_8bit: crosstune's optimizer" in text
    result = CliRunner().invoke(
        app, ["recipe", "export", str(recipe), "--to", to, "--out", str(tmp_path / "o.yaml")], terminal_width=400
    )
    assert (
        result.exit_code == 0
        and f"not mapped: the import of {source} (axolotl): adapter: qlora: QLoRA's" in result.output
    )
