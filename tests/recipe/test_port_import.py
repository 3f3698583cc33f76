"""`crosstune recipe import`: real-shaped Axolotl and TRL configs for Gemma 3 27B and Gemma 4 31B, 26B-A4B and E2B
(LoRA, QLoRA, MoE, FSDP: tests/fixtures/ports/) become recipes that validate and plan on a TPU, with every key that
did not carry over listed by name; other families, targets that match nothing and full fine-tunes are refused in one
line; --strict writes nothing when a key was not mapped."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.errors import InputError
from crosstune.families import identity
from crosstune.planner import plan_recipe
from crosstune.recipe import load_recipe
from crosstune.recipe.convert import import_config
from crosstune.recipe.porting import ImportRefused
from tests.helpers.hub_cache import put_in_hub_cache
from tests.helpers.paths import REPO

_register()
PORTS = REPO / "tests" / "fixtures" / "ports"
ALL7 = ["q", "k", "v", "o", "gate", "up", "down"]
QLORA_31B = "QLoRA's 4-bit NF4 base (bitsandbytes): `crosstune plan` holds gemma-4-31b's base in bf16, 61.4 GB"
# fixture: (hardware, the keys listed as not mapped, targets, jax mesh (fsdp, tp), a few mapped values)
CASES = {
    "axolotl/gemma3-27b-lora.yaml": ("tpu-v6e-8", ["val_set_size", "tf32"], ALL7, (1, 8),
                                     {"train.max_steps": 1250, "train.warmup_steps": 100, "data.max_seq_len": 4096}),
    "axolotl/gemma3-27b-qlora.yaml": ("tpu-v6e-8", ["adapter: qlora", "lora_target_modules", "val_set_size",
                                      "optimizer", "tf32", "flash_attention"], ["q", "k", "v", "o"], (1, 8),
                                      {"lora.alpha": 16.0, "data.columns.message_role": "from",
                                       "train.warmup_ratio": 0.1}),
    "axolotl/gemma4-31b-qlora.yaml": ("tpu-v5p-8", ["adapter: qlora", "optim_args", "val_set_size", "optimizer",
                                      "activation_offloading", "tf32", "attn_implementation",
                                      "gemma4_hybrid_attn_impl", "liger_glu_activation, liger_layer_norm, "
                                      "liger_rms_norm"], ALL7, (1, 4),
                                      {"train.kernels.loss": "cce", "data.sources[0].hub_split": "train[:10%]",
                                       "train.adam_beta2": 0.995, "train.max_grad_norm": 0.1}),
    "axolotl/gemma4-31b-lora-fsdp.yaml": ("tpu-v5p-8", [], ALL7, (1, 4),
                                          {"backend.torch.fsdp": True, "data.sources[0].config": "codev"}),
    "axolotl/gemma4-26b-a4b-moe-qlora.yaml": ("tpu-v5p-8", ["adapter: qlora", "lora_target_parameters",
                                              "val_set_size", "optimizer", "activation_offloading", "tf32",
                                              "attn_implementation", "gemma4_hybrid_attn_impl",
                                              "plugins: axolotl.integrations.kernels.KernelsPlugin",
                                              "liger_glu_activation, liger_rms_norm", "lora_mlp_kernel",
                                              "lora_qkv_kernel", "lora_o_kernel", "use_kernels", "use_scattermoe",
                                              "experts_implementation", "quantize_moe_experts"], ALL7, (2, 2),
                                              {"model.size": "26b-a4b", "train.kernels.compile": True}),
    "axolotl/gemma4-e2b-lora.yaml": ("tpu-v6e-4", ["processor_type", "freeze_mm_modules"], ALL7, (1, 4),
                                     {"model.size": "e2b", "train.warmup_steps": 20, "train.max_steps": 200}),
    "trl/gemma3-27b-lora.yaml": ("tpu-v6e-8", [], ALL7, (1, 8),
                                 {"train.warmup_ratio": 0.03, "train.kernels.attention": "eager"}),
    "trl/gemma3-27b-qlora.yaml": ("tpu-v6e-8", ["load_in_4bit", "lora_target_modules", "optim", "use_liger_kernel"],
                                  ["q", "k", "v"], (1, 8),
                                  {"train.schedule": "linear", "data.packing": False, "lora.dropout": 0.05}),
    "trl/gemma4-31b-lora.yaml": ("tpu-v5p-8", [], ALL7, (1, 4),
                                 {"data.columns.preset": "messages", "backend.torch.fsdp": True}),
    "trl/gemma4-26b-a4b-lora.yaml": ("tpu-v5p-8", ["lora_target_parameters"], ALL7, (2, 2),
                                     {"train.schedule": "constant", "train.per_device_batch_size": 2}),
    "trl/gemma4-e2b-lora.yaml": ("tpu-v6e-4", [], ["q", "k", "v", "o"], (1, 4),
                                 {"train.epochs": 3.0, "train.learning_rate": 2e-4, "train.global_batch_size": 8}),
}  # fmt: skip


def value_at(recipe, path: str):
    node = recipe.model_dump(mode="json")
    for part in path.replace("[", ".").replace("]", "").split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    return node


@pytest.mark.parametrize("fixture", sorted(CASES))
def test_each_fixture_imports_validates_and_plans(fixture, hub_cache, tmp_path):
    hardware, missing, targets, mesh, values = CASES[fixture]
    done = import_config(PORTS / fixture, tmp_path / "recipe.yaml", hardware=hardware)
    recipe = done.recipe
    assert [u.key for u in done.port.differences] == missing
    assert all(u.reason for u in done.port.unmapped)
    assert (recipe.hardware, recipe.backend.default, recipe.lora.targets) == (hardware, "jax", targets)
    assert (recipe.backend.jax.mesh.fsdp, recipe.backend.jax.mesh.tp) == mesh
    assert {path: value_at(recipe, path) for path in values} == values
    assert recipe.model.family == ("gemma3" if "gemma3" in fixture else "gemma4")
    assert plan_recipe(recipe).blockers == []
    (tmp_path / "recipe.yaml").write_text(done.text)  # what `import` writes, read back as `recipe validate` does
    assert load_recipe(tmp_path / "recipe.yaml").model_dump() == recipe.model_dump()


def test_qlora_s_line_says_what_bf16_costs(hub_cache, tmp_path):
    done = import_config(PORTS / "axolotl/gemma4-31b-qlora.yaml", tmp_path / "r.yaml", hardware="tpu-v5p-8")
    line = next(u for u in done.port.unmapped if u.key == "adapter: qlora").render()
    assert line.startswith(
        f"not mapped: adapter: qlora: {QLORA_31B} per device unsharded, where NF4 holds about "
        "17.9 GB (+43.5 GB; FSDP or the jax mesh divides it) (nearest: LoRA on a bf16 base"
    )


def test_family_and_size_come_from_a_cached_config(hub_cache, tiny_gemma4_dir, tmp_path):
    put_in_hub_cache(hub_cache, "acme/our-model", tiny_gemma4_dir)  # a name that says neither
    config = tmp_path / "trl.yaml"
    config.write_text("model_name_or_path: acme/our-model\ndataset_name: acme/data\nuse_peft: true\n")
    recipe = import_config(config, tmp_path / "r.yaml").recipe
    assert (recipe.model.family, recipe.model.size, recipe.model.path) == ("gemma4", "tiny", "hf://acme/our-model")
    assert recipe.hardware == "cpu"


def test_another_family_is_refused_by_name(hub_cache, tmp_path):
    config = tmp_path / "trl.yaml"
    config.write_text("model_name_or_path: meta-llama/Llama-3.1-8B\ndataset_name: acme/data\nuse_peft: true\n")
    with pytest.raises(ImportRefused) as e:
        import_config(config, tmp_path / "r.yaml")
    assert str(e.value).startswith("model_name_or_path: meta-llama/Llama-3.1-8B is not a Gemma 3 or Gemma 4 model")
    local = tmp_path / "qwen"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    config.write_text(f"base_model: {local}\nadapter: lora\nlearning_rate: 1.0e-4\ndatasets: []\n")
    with pytest.raises(ImportRefused) as e:
        import_config(config, tmp_path / "r.yaml")
    assert str(e.value) == f"base_model: {local} is a 'qwen2' model: {identity.TRAINED}"


@pytest.mark.parametrize(
    "lines, refusal",
    [
        ("lora_target_modules: [q_proj]", "lora_target_modules: 'q_proj' matches none of gemma4's decoder-layer"),
        ("lora_target_modules: 'vision_tower.*'", "lora_target_modules: 'vision_tower.*' matches none of gemma4's"),
        ("use_peft: false", "use_peft is false (a full fine-tune): crosstune trains LoRA"),
    ],
)
def test_what_can_t_be_trained_is_refused_in_one_line(lines, refusal, hub_cache, tmp_path):
    config = tmp_path / "trl.yaml"
    config.write_text(
        f"model_name_or_path: google/gemma-4-31B-it\ndataset_name: acme/d\nuse_peft: true\n{lines}\n".replace(
            "use_peft: true\nuse_peft: false", "use_peft: false"
        )
    )
    with pytest.raises(ImportRefused) as e:
        import_config(config, tmp_path / "r.yaml")
    assert refusal in str(e.value) and "\n" not in str(e.value)


def test_every_key_is_accounted_for(hub_cache, tmp_path):
    config = tmp_path / "trl.yaml"
    config.write_text(
        "model_name_or_path: google/gemma-4-31B-it\ndataset_name: acme/d\nuse_peft: true\n"
        "report_to: wandb\nneftune_noise_alpha: 5\nmy_own_key: 3\nwandb_project: x\n"
    )
    port = import_config(config, tmp_path / "r.yaml").port
    lines = [u.render() for u in port.unmapped]
    assert "not mapped: neftune_noise_alpha: no crosstune equivalent" in lines
    assert "not mapped: my_own_key: a TRL key crosstune's mapping does not carry" in lines
    assert any(line.startswith("ignored: report_to: ") for line in lines)
    assert any(line.startswith("ignored: wandb_project: an experiment tracker's") for line in lines)


def test_the_cli_writes_the_recipe_and_strict_writes_nothing(hub_cache, tmp_path):
    out = tmp_path / "gemma4-31b.yaml"
    qlora = PORTS / "axolotl/gemma4-31b-qlora.yaml"
    result = CliRunner().invoke(
        app, ["recipe", "import", str(qlora), "--out", str(out), "--strict"], terminal_width=400
    )
    assert result.exit_code == 1 and not out.exists(), result.output
    assert "9 key(s) not mapped, 4 ignored; --strict: nothing written" in result.output
    result = CliRunner().invoke(
        app, ["recipe", "import", str(qlora), "--out", str(out), "--hardware", "tpu-v5p-8"], terminal_width=400
    )
    assert result.exit_code == 0, result.output
    assert f"wrote {out}: recipe 'gemma4-31b' from {qlora} (axolotl), 9 key(s) not mapped, 4 ignored" in result.output
    assert f"next: crosstune plan {out}   then   crosstune study {out} --backend jax --out BUNDLE" in result.output
    head = out.read_text().splitlines()
    assert head[0].startswith(f"# crosstune recipe import: {qlora} (axolotl)")
    assert f"# not mapped: adapter: qlora: {QLORA_31B}" in "\n".join(head)
    assert CliRunner().invoke(app, ["recipe", "validate", str(out)]).exit_code == 0
    assert CliRunner().invoke(app, ["plan", str(out)]).exit_code == 0
    rerun = CliRunner().invoke(app, ["recipe", "import", str(PORTS / "trl/gemma4-31b-lora.yaml"), "--out", str(out)])
    assert rerun.exit_code == 0, rerun.output  # its own file: replaced
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: mine\n")
    refused = CliRunner().invoke(app, ["recipe", "import", str(qlora), "--out", str(mine)], terminal_width=400)
    assert refused.exit_code == 1 and "is not a file crosstune recipe import wrote" in refused.output
    assert mine.read_text() == "name: mine\n"


def test_the_config_is_read_by_the_strict_loader(tmp_path):
    config = tmp_path / "axolotl.yaml"
    config.write_text("base_model: google/gemma-4-31B-it\nlora_r: 8\nlora_r: 16\n")
    with pytest.raises(InputError) as e:
        import_config(config, tmp_path / "r.yaml")
    assert str(e.value).startswith(f"{config}:3: not valid YAML: duplicate key 'lora_r' (first on line 2)")
