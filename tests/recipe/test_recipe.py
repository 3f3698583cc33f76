"""Recipe validation: every shipped recipe is valid; bad files get exact YAML paths, lines and hints."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from crosstune.recipe import RecipeError, load_recipe, parse_recipe
from tests.helpers import paths
from tests.helpers.recipe_text import MINIMAL, errors

RECIPES = sorted(paths.RECIPES.glob("*.yaml"))


def test_shipped_recipes_exist():
    names = {p.name for p in RECIPES}
    assert {"tiny-cpu.yaml", "gemma4-31b-tpu-v5p-8.yaml", "gemma4-31b-2xh100.yaml"} <= names
    assert any("gemma3" in n for n in names)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_shipped_recipe_validates(path):
    recipe = load_recipe(path)
    assert recipe.name == path.stem


def test_seed_hyperparameters():
    r = load_recipe(paths.RECIPES / "gemma4-31b-tpu-v5p-8.yaml")
    assert (r.lora.rank, r.lora.alpha, r.lora.dropout) == (64, 64, 0.05)
    assert (r.train.learning_rate, r.train.warmup_steps, r.train.weight_decay) == (1e-4, 100, 0.001)
    assert (r.train.per_device_batch_size, r.train.grad_accumulation) == (1, 8)
    assert (r.data.max_seq_len, r.data.truncation, r.data.subsample.size, r.data.subsample.seed) == (
        3072,
        "drop",
        10000,
        42,
    )
    assert (r.backend.jax.mesh.fsdp, r.backend.jax.mesh.tp, r.hardware) == (1, 4, "tpu-v5p-8")


def test_minimal_recipe_defaults():
    r = parse_recipe(MINIMAL)
    assert r.lora.targets == ["q", "k", "v", "o", "gate", "up", "down"]
    assert r.data.columns.resolved() == {
        "system": "system",
        "prompt": "prompt",
        "response": "response",
        "messages": None,
    }


def test_unknown_key_wrong_type_and_rank():
    bad = MINIMAL + "lora:\n  rnak: 8\n  rank: 0\n  dropout: lots\n"
    assert errors(bad) == [
        ("lora.rnak", 13, "unknown key 'rnak'"),
        ("lora.rank", 14, "Input should be greater than 0"),
        ("lora.dropout", 15, "Input should be a valid number, not 'lots'"),
    ]
    with pytest.raises(RecipeError) as info:
        parse_recipe(bad)
    assert info.value.problems[0].hint == "did you mean 'rank'?"


def test_tp_that_does_not_divide_global_kv_heads():
    bad = MINIMAL.replace("tp: 4", "tp: 8").replace("hardware: tpu-v5p-8", "hardware: tpu-v6e-8")
    ((path, line, msg),) = errors(bad)
    assert (path, line) == ("backend.jax.mesh.tp", 11)
    assert msg == "tp=8 cannot shard gemma-4-31b: 4 KV heads on global layers (10) not divisible by tp=8"
    with pytest.raises(RecipeError) as info:
        parse_recipe(bad)
    assert "use tp in {1, 2, 4}" in info.value.problems[-1].hint or any(
        "use tp in {1, 2, 4}" in p.hint for p in info.value.problems
    )
    ok = bad.replace("backend:\n  jax:\n", "backend:\n  jax:\n    replicate_indivisible_heads: true\n")
    assert parse_recipe(ok).backend.jax.mesh.tp == 8


def test_mesh_must_match_hardware_and_unknown_hardware():
    assert errors(MINIMAL.replace("fsdp: 1", "fsdp: 2")) == [
        ("backend.jax.mesh", 11, "fsdp × tp = 2×4 = 8, but tpu-v5p-8 has 4 devices")
    ]
    assert errors(MINIMAL.replace("hardware: tpu-v5p-8", "hardware: tpu-v5p8")) == [
        ("hardware", 8, "unknown hardware target 'tpu-v5p8'; did you mean 'tpu-v5p-8'?")
    ]


def test_checkpoint_family_mismatch(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"model_type": "gemma3_text"}')
    text = MINIMAL.replace("size: 31b", f"path: {ckpt}")
    assert errors(text) == [("model.family", 3, f"{ckpt / 'config.json'} is a 'gemma3_text' checkpoint, not gemma4")]


def test_structural_errors():
    assert errors("- just\n- a list\n") == [("", 1, "a recipe is a YAML mapping (name:, model:, data:, ...)")]
    assert errors("name: [unclosed\n")[0][2].startswith("not valid YAML")
    missing = errors("name: x\nmodel:\n  family: gemma4\n")
    assert ("data", 1, "Field required") in missing
    assert ("model", 2, "give model.path (a checkpoint directory) or model.size (a known spec such as 31b)") in missing
    assert errors(MINIMAL + "eval:\n  samples: 2\n  k: [1, 5]\n") == [
        ("eval", 12, "pass@k needs k <= samples (2); got k = [5]")
    ]


def test_overrides_and_cli(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text(MINIMAL)
    assert load_recipe(f, ["train.max_steps=7", "lora.rank=4"]).train.max_steps == 7
    from crosstune.cli import _register, app

    _register()
    result = CliRunner().invoke(app, ["recipe", "validate", str(f), "--set", "backend.jax.mesh.tp=8"])
    assert result.exit_code == 1
    assert f"{f}:11: error at backend.jax.mesh.tp: tp=8 cannot shard" in result.output
    assert CliRunner().invoke(app, ["recipe", "validate", str(f)]).exit_code == 0


def test_native_reasoning_needs_gemma4():
    text = MINIMAL.replace("family: gemma4", "family: gemma3").replace("size: 31b", "size: 27b")
    text = text.replace("    - path: data.jsonl", "    - path: data.jsonl\n  reasoning: native")
    assert errors(text) == [("data.reasoning", 8, "gemma3 has no native reasoning channel")]


def test_k_and_v_go_together():
    text = MINIMAL + "lora:\n  targets: [q, k, o]\n"
    ((path, line, msg),) = errors(text)
    assert (path, line) == ("lora.targets", 13) and msg.startswith("k and v must be targeted together")


def test_relative_paths_resolve_against_the_recipe_folder_never_the_cwd(tmp_path, monkeypatch):
    from crosstune.recipe import UnlocatedRecipeError, resolve_path

    monkeypatch.chdir(tmp_path)
    from_text = parse_recipe(MINIMAL)
    assert from_text.base_dir is None
    with pytest.raises(UnlocatedRecipeError, match=r"relative path 'data.jsonl' but the recipe was not loaded"):
        resolve_path(from_text, from_text.data.sources[0].path)
    assert resolve_path(from_text, "/abs/x") == Path("/abs/x")
    given = parse_recipe(MINIMAL, base_dir=tmp_path / "here")
    assert resolve_path(given, "data.jsonl") == tmp_path / "here" / "data.jsonl"
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "r.yaml").write_text(MINIMAL)
    loaded = load_recipe(folder / "r.yaml")
    assert resolve_path(loaded, "data.jsonl") == folder / "data.jsonl"
    assert "data.sources[0].path" in [w.path for w in loaded.warnings]  # nothing at recipes/data.jsonl (yet)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_shipped_recipes_pack(path):
    """Unpacked rows charge padding to the jax backend only (it has no padding-free path): every shipped recipe
    packs."""
    recipe = load_recipe(path)
    assert recipe.data.packing
    assert not [p for p in recipe.warnings if p.path == "data.packing"]


def test_unpacked_recipe_warns_about_padding_skew():
    recipe = parse_recipe(MINIMAL.replace("    - path: data.jsonl", "    - path: data.jsonl\n  packing: false"))
    (warning,) = [p for p in recipe.warnings if p.path == "data.packing"]
    assert warning.severity == "warning" and "padding included" in warning.message and "mfu_computed" in warning.hint


def test_global_batch_must_split_over_both_backends():
    ok = MINIMAL + "train:\n  global_batch_size: 8\n"
    assert parse_recipe(ok).train.global_batch_size == 8
    bad = MINIMAL + "train:\n  per_device_batch_size: 4\n  global_batch_size: 6\n"
    assert errors(bad) == [
        (
            "train.global_batch_size",
            14,
            f"6 rows per step can't be split into micro-batches of per_device_batch_size "
            f"4 × 1 data-parallel devices of {backend}",
        )
        for backend in ("torch (devices × nodes)", "jax (mesh.fsdp)")
    ]


def test_moe_experts_target_is_refused_with_its_reason():
    """LoRA on the MoE's experts: refused at the lora.targets line, naming why (the jax stack can't adapt them)."""
    from crosstune.families.spec import EXPERTS_REFUSED

    moe = MINIMAL.replace("size: 31b", "size: 26b-a4b").replace("{fsdp: 1, tp: 4}", "{fsdp: 2, tp: 2}")
    assert errors(moe + "lora:\n  targets: [q, k, v, experts]\n") == [("lora.targets", 13, EXPERTS_REFUSED)]
    assert "ragged_dot" in EXPERTS_REFUSED and "target_parameters" in EXPERTS_REFUSED
    assert errors(MINIMAL + "lora:\n  targets: [q, experts]\n") == [
        ("lora.targets", 13, "gemma-4-31b has no experts (no MoE)")
    ]
    recipe = parse_recipe(moe, "r.yaml")  # the default targets: attention and the dense MLP, no warning about them
    assert "experts" not in recipe.lora.targets


def test_kv_shared_layers_are_a_warning_on_k_and_v():
    e4b = MINIMAL.replace("size: 31b", "size: e4b").replace("{fsdp: 1, tp: 4}", "{fsdp: 2, tp: 2}")
    recipe = parse_recipe(e4b, "r.yaml")
    warned = [p.message for p in recipe._warnings if p.path == "lora.targets"]
    assert warned == ["the last 18 layers are KV-shared (no k/v projections): k and v adapt only the first 24"]


def test_serve_tp_uses_vllms_head_rule():
    """One head rule (ModelSpec.tp_problems): vLLM replicates the 31B's 4 global KV heads at tp 8, so a serve tp the
    training mesh could not take is accepted; 3 splits no head group (the sliding layers' 32 query heads first)."""
    assert parse_recipe(MINIMAL + "serve:\n  tensor_parallel_size: 4\n", "r.yaml").serve.tensor_parallel_size == 4
    text = MINIMAL.replace("hardware: tpu-v5p-8", "hardware: tpu-v6e-8").replace("fsdp: 1, tp: 4", "fsdp: 2, tp: 4")
    assert parse_recipe(text + "serve:\n  tensor_parallel_size: 8\n", "r.yaml").serve.tensor_parallel_size == 8
    assert "tp=6 is not a multiple of the 4 KV heads" in errors(MINIMAL + "serve:\n  tensor_parallel_size: 6\n")[0][2]
    assert errors(MINIMAL + "serve:\n  tensor_parallel_size: 3\n") == [
        (
            "serve.tensor_parallel_size",
            13,
            "vLLM can't split gemma-4-31b over tensor_parallel_size 3: 32 query heads on sliding layers (50) not "
            "divisible by tp=3; 16 KV heads on sliding layers (50) not divisible by tp=3; 32 query heads on global "
            "layers (10) not divisible by tp=3; 4 KV heads on global layers (10) not divisible by tp=3",
        )
    ]


def test_one_rule_resolves_a_recipe_s_paths_wherever_they_are_read(tmp_path):
    """An exported config, the recipe checks and the stages resolve a relative path the same way: against the recipe
    file's folder (crosstune.recipe.paths); a recipe from no file has nothing there. Whether a path is a hub id is
    its text alone (hf://OWNER/NAME), never what is on disk."""
    from crosstune.recipe.hub_ids import hub_model_id
    from crosstune.recipe.paths import UnlocatedRecipeError, recipe_path

    (tmp_path / "acme" / "model").mkdir(parents=True)
    assert recipe_path("acme/model", tmp_path) == tmp_path / "acme" / "model"
    assert recipe_path("~/x", None) == Path("~/x").expanduser()
    with pytest.raises(UnlocatedRecipeError):
        recipe_path("acme/model", None)
    # the hub-id rule is the text (crosstune.hub): a path is a path, on disk or not; hf://OWNER/NAME is a hub id
    assert hub_model_id("acme/model") is None and hub_model_id("hf://acme/model") == "acme/model"
