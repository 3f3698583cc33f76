"""PEFT adapter IO and the streaming merge, on tiny models with adapters made by PEFT itself (no backend needed).

Logits are compared in float64: in float32, x·(W + s·BA) and x·W + s·(x·A)·B differ by rounding at the level of
HF's own eager-vs-sdpa floor (1.7e-5 on Gemma 4), which would hide a real layout error of the same size."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from crosstune.export import export_run, read_peft_adapter, verify_manifest, write_peft_adapter
from crosstune.export.merge import merge_lora_into_shards
from crosstune.families import get_family
from crosstune.run.shards import from_float32, to_float32
from tests.helpers.export import assert_logits_close, hf_logits, peft_logits, random_adapter, reshard, torch_run
from tests.helpers.paths import RECIPES

# PEFT vs merged fp32 weights: measured <= 1.4e-5 x max|logit|; an adapter moves logits by > 1e-2 x.
RELTOL = 5e-5


@pytest.fixture(scope="module")
def g4_run(tmp_path_factory, tiny_gemma4_dir):
    return torch_run(tmp_path_factory.mktemp("g4") / "run", tiny_gemma4_dir, "gemma4", rank=4, alpha=8.0)


@pytest.fixture(scope="module")
def g4_export(tmp_path_factory, g4_run):
    out = tmp_path_factory.mktemp("g4_export") / "out"
    export_run(g4_run, "both", out)
    return out


def test_adapter_read_write_round_trip(tmp_path, g4_run, tiny_gemma4_dir):
    lora, cfg = read_peft_adapter(g4_run / "adapter", family="gemma4")
    spec = get_family("gemma4").spec_from_hf_config(json.loads((tiny_gemma4_dir / "config.json").read_text()))
    assert lora.rank == 4 and lora.scale == 2.0 and cfg["r"] == 4
    assert set(lora.modules) == set(get_family("gemma4").hf_lora_modules(spec, lora.targets))
    assert "model.layers.5.self_attn.v_proj" not in lora.modules  # k_eq_v global layer: no v_proj
    write_peft_adapter(lora, tmp_path, str(tiny_gemma4_dir), spec=spec)
    a = load_file(str(g4_run / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "adapter_model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    # For vLLM: the k_eq_v (global) layers also carry v_proj = k_proj; nothing else is added.
    k_eq_v = [i for i in range(spec.num_layers) if spec.kind(i).k_eq_v]
    aliases = {k.replace("k_proj", "v_proj") for k in a if "k_proj" in k and int(k.split(".")[4]) in k_eq_v}
    assert k_eq_v and b.keys() - a.keys() == aliases
    assert all(torch.equal(b[k], a[k.replace("v_proj", "k_proj")]) for k in aliases)
    again, _ = read_peft_adapter(tmp_path, family="gemma4")  # the aliases are dropped on reading
    assert again.modules.keys() == lora.modules.keys()
    np.testing.assert_array_equal(
        peft_logits(tiny_gemma4_dir, tmp_path, dtype="float32"),
        peft_logits(tiny_gemma4_dir, g4_run / "adapter", dtype="float32"),
    )


def test_merged_export_equals_peft_and_keeps_base_files(g4_export, g4_run, tiny_gemma4_dir):
    merged, adapter = g4_export / "merged", g4_export / "adapter"
    want = peft_logits(tiny_gemma4_dir, g4_run / "adapter")
    base = hf_logits(tiny_gemma4_dir)
    got = hf_logits(merged)
    assert np.abs(base - want).max() > 0.1  # the adapter changes the model: the comparison means something
    assert_logits_close(got, want, rel=RELTOL)
    assert_logits_close(peft_logits(tiny_gemma4_dir, adapter), got, rel=RELTOL)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (merged / name).read_bytes() == (tiny_gemma4_dir / name).read_bytes(), name
    assert verify_manifest(merged) == [] and verify_manifest(adapter) == []
    manifest = json.loads((merged / "export_manifest.json").read_text())
    assert manifest["source"]["backend"] == "torch" and manifest["source"]["rank"] == 4
    assert set(manifest["files"]) >= {"model.safetensors", "config.json"}


def test_merge_only_changes_target_tensors(g4_export, tiny_gemma4_dir):
    base = load_file(str(tiny_gemma4_dir / "model.safetensors"))
    merged = load_file(str(g4_export / "merged" / "model.safetensors"))
    assert list(base) == list(merged)
    changed = {k for k in base if not torch.equal(base[k], merged[k])}
    assert changed and all(k.endswith("_proj.weight") for k in changed)
    assert "model.layers.0.input_layernorm.weight" not in changed


def test_sharded_and_multimodal_prefix(tmp_path, g4_run, g4_export, tiny_gemma4_dir):
    """Sharded base with the multimodal `model.language_model.` prefix and a vision tower with look-alike names:
    each shard keeps its name and tensors; only language-model targets change, by exactly the single-file merge."""
    vision = {"model.vision_tower.layers.0.self_attn.q_proj.weight": torch.randn(8, 8)}
    base = reshard(tiny_gemma4_dir, tmp_path / "base", 3, prefix="model.language_model.", extra=vision)
    lora, _ = read_peft_adapter(g4_run / "adapter", family="gemma4")
    out = tmp_path / "merged"
    out.mkdir()
    merge_lora_into_shards(base, lora, out)
    assert (out / "model.safetensors.index.json").read_bytes() == (base / "model.safetensors.index.json").read_bytes()
    export_run(g4_run, "adapter", tmp_path / "adapter", base=base)  # keys follow the base's layer prefix
    keys = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors")).keys()
    assert keys and all(k.startswith("base_model.model.model.language_model.layers.") for k in keys)
    single = load_file(str(g4_export / "merged" / "model.safetensors"))
    shards = sorted(out.glob("model-*.safetensors"))
    assert len(shards) == 3
    for shard in shards:
        got, src = load_file(str(shard)), load_file(str(base / shard.name))
        assert list(got) == list(src)
        for name, value in got.items():
            if name.startswith("model.vision_tower."):
                assert torch.equal(value, src[name])
            else:
                assert torch.equal(value, single["model." + name[len("model.language_model.") :]]), name


def test_bf16_base_rounds_like_torch(tmp_path, g4_run, tiny_gemma4_dir):
    base = reshard(tiny_gemma4_dir, tmp_path / "base", 2, dtype=torch.bfloat16)
    lora, _ = read_peft_adapter(g4_run / "adapter", family="gemma4")
    out = tmp_path / "merged"
    out.mkdir()
    merge_lora_into_shards(base, lora, out)
    name = "model.layers.3.mlp.down_proj.weight"
    fname = json.loads((base / "model.safetensors.index.json").read_text())["weight_map"][name]
    w = load_file(str(base / fname))[name]
    want = (w.float() + torch.from_numpy(lora.delta("model.layers.3.mlp.down_proj"))).to(torch.bfloat16)
    got = load_file(str(out / fname))[name]
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)


def test_bf16_conversion_matches_torch_rounding():
    x = np.concatenate([np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 100, [np.inf, -np.inf]])
    x = np.concatenate([x, np.array([1.00390625, 1.01171875, 3.4e38], np.float32)])  # ties to even, overflow
    want = torch.from_numpy(x).to(torch.bfloat16).view(torch.uint16).numpy()
    np.testing.assert_array_equal(from_float32(x, "BF16"), want)
    np.testing.assert_array_equal(to_float32(want, "BF16"), torch.from_numpy(x).to(torch.bfloat16).float().numpy())
    assert np.isnan(to_float32(from_float32(np.array([np.nan], np.float32), "BF16"), "BF16")).all()


def cli_app():
    from crosstune.cli import _register, app

    if not any(c.name == "export" for c in app.registered_commands):
        _register()
    return app


def test_torch_checkpoint_step_and_cli(tmp_path, g4_run, tiny_gemma4_dir):
    app = cli_app()

    run = tmp_path / "run"
    torch_run(run, tiny_gemma4_dir, "gemma4", rank=4, alpha=8.0, seed=1)
    random_adapter(tiny_gemma4_dir, "gemma4", run / "checkpoints" / "checkpoint-7", rank=4, alpha=8.0, seed=2)
    result = CliRunner().invoke(
        app, ["export", str(run), "--to", "adapter", "--step", "7", "--out", str(tmp_path / "a")]
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "a" / "export_manifest.json").read_text())
    assert manifest["source"]["step"] == 7 and manifest["source"]["checkpoint"].endswith("checkpoint-7")
    a7 = load_file(str(tmp_path / "a" / "adapter_model.safetensors"))
    src = load_file(str(run / "checkpoints" / "checkpoint-7" / "adapter_model.safetensors"))
    assert src and all(torch.equal(a7[k], src[k]) for k in src)
    result = CliRunner().invoke(
        app, ["export", str(run), "--to", "adapter", "--step", "9", "--out", str(tmp_path / "b")]
    )
    assert result.exit_code == 1 and "no checkpoint-9" in result.output


@pytest.mark.slow
def test_trained_torch_run_exports(tmp_path, synth_corpus_dir, tiny_gemma4_dir):
    """The real thing: `crosstune train --backend torch` for 2 steps, then export: merged = base + run's adapter."""

    from crosstune.recipe import load_recipe
    from crosstune.train.session import train

    recipe = load_recipe(
        RECIPES / "tiny-cpu.yaml",
        [
            f"model.path={tiny_gemma4_dir}",
            f"data.sources=[{{path: {synth_corpus_dir / 'train.jsonl'}}}]",
            "data.truncation=truncate",
            f"output_dir={tmp_path}",
            f"eval.problems={synth_corpus_dir / 'eval'}",
            "train.max_steps=2",
            "train.checkpoint_every=1",
        ],
    )
    run = tmp_path / "run"
    from crosstune.data import prepare_dataset

    prepare_dataset(recipe)  # the torch backend reads a preparation; `crosstune train` makes it first
    train(recipe, run, progress=False, backend="torch")
    made = export_run(run, "both", tmp_path / "out")
    assert json.loads((made["merged"] / "export_manifest.json").read_text())["source"]["step"] == 2
    merged = hf_logits(made["merged"])
    assert_logits_close(merged, peft_logits(tiny_gemma4_dir, run / "adapter"), rel=RELTOL)
    assert_logits_close(merged, peft_logits(tiny_gemma4_dir, made["adapter"]), rel=RELTOL)
    export_run(run, "adapter", tmp_path / "step1", step=1)
    assert json.loads((tmp_path / "step1" / "export_manifest.json").read_text())["source"]["step"] == 1
