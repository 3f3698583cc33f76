"""JAX runs <-> HF: a tunix Orbax LoRA checkpoint exports to a merged model and a PEFT adapter that reproduce the JAX
model's logits, and a PEFT adapter imports into the tunix model exactly (independent k/v A -> block kv LoRA)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from crosstune.export import export_run, read_peft_adapter
from crosstune.families import get_family
from crosstune.train.jax.checkpoints import read_orbax_lora
from crosstune.train.jax.lora import install_lora, lora_to_qwix
from tests.helpers.export import (
    assert_logits_close,
    hf_logits,
    jax_logits,
    jax_lora_model,
    jax_run,
    peft_logits,
    random_adapter,
)
from tests.helpers.paths import RECIPES

# JAX vs HF in fp32 (other op order): measured <= 4.8e-5 x max|logit|; a LoRA moves logits by > 1e-2 x.
RELTOL = 2e-4

FAMILIES = ["gemma4", pytest.param("gemma3", marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=FAMILIES)
def exported(request, tmp_path_factory, tiny_gemma3_dir, tiny_gemma4_dir):
    family = request.param
    base = {"gemma3": tiny_gemma3_dir, "gemma4": tiny_gemma4_dir}[family]
    root = tmp_path_factory.mktemp(f"jax_{family}")
    logits = jax_run(root / "run", base, family, rank=4, alpha=8.0, step=3)
    export_run(root / "run", "both", root / "out")
    return family, base, root, logits


def test_merged_export_matches_jax_logits(exported):
    family, base, root, jax_out = exported
    merged = hf_logits(root / "out" / "merged", dtype="float32")
    assert np.abs(hf_logits(base, dtype="float32") - jax_out).max() > 0.1  # the LoRA matters
    assert_logits_close(merged, jax_out, rel=RELTOL)
    manifest = json.loads((root / "out" / "merged" / "export_manifest.json").read_text())
    assert manifest["source"]["backend"] == "jax" and manifest["source"]["step"] == 3


def test_adapter_export_matches_merged(exported):
    family, base, root, _ = exported
    merged = hf_logits(root / "out" / "merged")
    assert_logits_close(peft_logits(base, root / "out" / "adapter"), merged, rel=RELTOL)
    lora, cfg = read_peft_adapter(root / "out" / "adapter", family=family)
    assert cfg["rank_pattern"] == {}  # native Qwix LoRA: every module at the run's rank
    if family == "gemma4":  # the kv_einsum block LoRA: k and v each with their own A, as PEFT has them
        a_k = lora.modules["model.layers.0.self_attn.k_proj"][0]
        assert a_k.shape[0] == 4 and not np.array_equal(a_k, lora.modules["model.layers.0.self_attn.v_proj"][0])
        assert "model.layers.5.self_attn.v_proj" not in lora.modules  # k_eq_v layer: k_proj only


def test_orbax_round_trip_through_peft_layout(exported):
    """Qwix params -> PEFT layout -> Qwix params is the identity for a JAX run's LoRA (fused k/v as block LoRAs)."""
    family, base, root, _ = exported
    params, step = read_orbax_lora(root / "run")
    assert step == 3
    lora, _ = read_peft_adapter(root / "out" / "adapter", family=family)
    spec = get_family(family).spec_from_hf_config(json.loads((base / "config.json").read_text()))
    back, masks = lora_to_qwix(lora, spec)
    assert set(masks) == {n for n in params if n.endswith("kv_einsum.w_lora_b")} and masks
    assert set(back) == set(params)
    for name, value in params.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)


@pytest.mark.parametrize("family", ["gemma4", "gemma3"])
def test_torch_adapter_imports_into_jax(tmp_path, family, tiny_gemma3_dir, tiny_gemma4_dir):
    base = {"gemma3": tiny_gemma3_dir, "gemma4": tiny_gemma4_dir}[family]
    adapter = random_adapter(base, family, tmp_path / "adapter", rank=4, alpha=8.0, seed=3)
    lora, _ = read_peft_adapter(adapter, family=family)
    spec = get_family(family).spec_from_hf_config(json.loads((base / "config.json").read_text()))
    model, mesh = jax_lora_model(family, base, lora.rank, lora.alpha, lora.targets)
    masks = install_lora(model, lora, spec)
    kv = [i for i in range(spec.num_layers) if not spec.kind(i).k_eq_v]
    assert set(masks) == {f"layers.{i}.attn.kv_einsum.w_lora_b" for i in kv}  # independent k/v A: block LoRA
    got = jax_logits(model, mesh)
    want = peft_logits(base, adapter, dtype="float32")
    assert_logits_close(got, want, rel=RELTOL)


@pytest.mark.slow
def test_trained_jax_run_exports(tmp_path, synth_corpus_dir, tiny_gemma4_dir):
    """The real thing: `crosstune train --backend jax` for 2 steps, then export; merged logits = the JAX model with
    the checkpoint's LoRA."""
    from flax import nnx

    from crosstune.recipe import load_recipe
    from crosstune.train.session import train

    recipe_file = RECIPES / "tiny-cpu.yaml"
    recipe = load_recipe(
        recipe_file,
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
    train(recipe, run, progress=False, backend="jax")
    export_run(run, "both", tmp_path / "out")
    params, step = read_orbax_lora(run)
    assert step == 2
    model, mesh = jax_lora_model("gemma4", tiny_gemma4_dir, recipe.lora.rank, recipe.lora.alpha)
    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.LoRAParam):
            node.value = params[".".join(map(str, path))]
    want = jax_logits(model, mesh)
    assert_logits_close(hf_logits(tmp_path / "out" / "merged", dtype="float32"), want, rel=RELTOL)
    merged = hf_logits(tmp_path / "out" / "merged")
    assert_logits_close(peft_logits(tiny_gemma4_dir, tmp_path / "out" / "adapter"), merged, rel=RELTOL)
