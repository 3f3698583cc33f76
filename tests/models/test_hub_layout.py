"""The hub's checkpoint layout at tiny size: `model tiny --layout multimodal --dtype bfloat16
--shards 2` is Gemma4ForConditionalGeneration with a vision tower, bf16, 2 safetensors shards with an index; both
backends train on it and both exports come out of each run in the same layout."""

from __future__ import annotations

import json

import numpy as np
import pytest

from crosstune.models.build import build_checkpoint, pseudo_words, shard_size_for, sized_spec
from crosstune.run.shards import SafetensorsFile, from_float32
from tests.helpers.jax_recipes import tiny_recipe


@pytest.fixture(scope="module")
def hub_tiny(tmp_path_factory, synth_corpus_dir):
    out = tmp_path_factory.mktemp("hub-tiny") / "model"
    return build_checkpoint(
        "gemma4", out, layout="multimodal", dtype="bfloat16", shards=2, seed=0, corpus_dir=synth_corpus_dir
    )


def _tensors(folder) -> dict[str, tuple[str, str, tuple[int, ...]]]:
    """name -> (file, safetensors dtype, shape) over every shard the checkpoint's index names."""
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    out = {}
    for file in sorted(set(index.values())):
        for name, t in SafetensorsFile(folder / file).tensors.items():
            out[name] = (file, t.dtype, t.shape)
    assert out.keys() == index.keys()
    return out


def test_the_hub_layout_at_tiny_size(hub_tiny):
    config = json.loads((hub_tiny / "config.json").read_text())
    assert config["architectures"] == ["Gemma4ForConditionalGeneration"] and config["dtype"] == "bfloat16"
    assert config["text_config"]["model_type"] == "gemma4_text" and "architectures" not in config["text_config"]
    assert sorted(p.name for p in hub_tiny.glob("*.safetensors")) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    tensors = _tensors(hub_tiny)
    assert {dtype for _, dtype, _ in tensors.values()} == {"BF16"}
    assert all(n.startswith(("model.language_model.", "model.vision_tower.", "model.embed_vision.")) for n in tensors)
    assert any(n.startswith("model.vision_tower.") for n in tensors) and "lm_head.weight" not in tensors  # tied
    layers = {int(n.split(".")[3]) for n in tensors if ".language_model.layers." in n}
    assert layers == set(range(6)) and tensors["model.language_model.embed_tokens.weight"][2] == (1024, 64)


def test_the_12b_hub_layout_at_tiny_size(tiny_gemma4_unified_dir):
    """The 12B's architecture (gemma4_unified) in its hub layout: the decoder under model.language_model., an
    encoder-free vision embedder beside it (no vision tower), tied head; it reads back as the unified spec."""
    from crosstune.families import model_dir_spec
    from crosstune.run.shards import SafetensorsFile

    config = json.loads((tiny_gemma4_unified_dir / "config.json").read_text())
    assert config["architectures"] == ["Gemma4UnifiedForConditionalGeneration"]
    assert config["model_type"] == "gemma4_unified" and config["text_config"]["model_type"] == "gemma4_unified_text"
    tensors = SafetensorsFile(tiny_gemma4_unified_dir / "model.safetensors").tensors
    prefixes = {n.split(".")[1] for n in tensors}  # the hub's names (transformers' conversion on save)
    assert prefixes == {"language_model", "vision_embedder", "embed_vision"} and "lm_head.weight" not in tensors
    assert "model.language_model.layers.5.self_attn.v_proj.weight" not in tensors  # k_eq_v global layer
    assert tensors["model.language_model.layers.5.self_attn.k_proj.weight"].shape == (64, 64)  # 1 KV head of 64
    spec = model_dir_spec(tiny_gemma4_unified_dir, "gemma4")
    assert spec.unified and spec.layer_types == sized_spec("gemma4", "tiny-unified").layer_types


def test_sized_spec_two_layers_of_the_31b():
    spec = sized_spec("gemma4", "31b", layers=2)
    assert spec.layer_types == ("sliding", "global") and spec.vocab_size == 262144
    assert (spec.hidden_size, spec.intermediate_size) == (5376, 21504)
    g = spec.attention["global"]
    assert (g.num_heads, g.num_kv_heads, g.head_dim, g.k_eq_v) == (32, 4, 512, True)
    assert spec.attention["sliding"].num_kv_heads == 16 and spec.final_logit_softcap == 30.0
    assert sized_spec("gemma4", "31b", layers=12).layer_types.count("global") == 2  # 5:1 from 6 layers on
    assert sized_spec("gemma4", "tiny", vocab=4096).vocab_size == 4096


def test_shard_count_is_exact_and_refused_when_impossible():
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    assert shard_size_for(model, 3) > 0
    with pytest.raises(ValueError, match="can't be split into exactly 5 shards"):
        shard_size_for(model, 5)  # 4 tensors


def test_a_real_vocabulary_is_learned_past_what_the_corpus_supports(synth_corpus_dir):
    """A vocabulary the corpus alone can't fill (~4k entries here) takes its extra entries from seeded
    pseudo-words; the result has exactly the size asked for (the rehearsal: 262,144, ~15 s)."""
    from crosstune.models.build import _tokenizer

    assert len(pseudo_words(2500)) == 3 and pseudo_words(10) == pseudo_words(10)
    tokenizer = _tokenizer("gemma4", 20_000, synth_corpus_dir)
    assert len(tokenizer) == 20_000
    text = "module top(input a, output y); assign y = ~a; endmodule"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False).input_ids) == text


def test_both_backends_and_both_exports_on_the_hub_layout(hub_tiny, synth_corpus_dir, tmp_path):
    """One step of each backend on the multimodal bf16 sharded checkpoint (a large step: bf16 rounding would swallow
    a small LoRA update; short rows and one device keep it quick); each run's merged export keeps the shard
    names and the index, leaves the vision tower byte for byte, and changes each target by exactly bf16(W + s·B@A)."""
    from crosstune.export import export_run, read_peft_adapter
    from crosstune.train.session import train

    base = _tensors(hub_tiny)
    short = ["train.max_steps=1", "train.learning_rate=0.05", "train.warmup_steps=0", "train.per_device_batch_size=1"]
    short += ["data.max_seq_len=256", "data.subsample={size: 16, seed: 0}", "backend.jax.mesh={fsdp: 1, tp: 1}"]
    for backend in ("torch", "jax"):
        recipe = tiny_recipe(hub_tiny, synth_corpus_dir, tmp_path, "gemma4", *short)
        run = train(recipe, tmp_path / backend, progress=False, backend=backend).run_dir
        assert json.loads((run / "run.json").read_text())["backend"] == backend
        out = tmp_path / f"{backend}-export"
        export_run(run, "both", out)
        merged = out / "merged"
        index = "model.safetensors.index.json"
        assert (merged / index).read_bytes() == (hub_tiny / index).read_bytes()
        lora, _ = read_peft_adapter(out / "adapter", family="gemma4")
        keys = SafetensorsFile(out / "adapter" / "adapter_model.safetensors").tensors
        assert keys and all(k.startswith("base_model.model.model.language_model.layers.") for k in keys)
        changed = 0
        for name, (file, _, shape) in base.items():
            rows = shape[0] if shape else 0
            before = SafetensorsFile(hub_tiny / file).read_rows(name, 0, rows)  # bf16 as its uint16 bits
            after = SafetensorsFile(merged / file).read_rows(name, 0, rows)
            module = "model." + name.removeprefix("model.language_model.").removesuffix(".weight")
            if name.startswith("model.language_model.layers.") and module in lora.modules:
                want = from_float32(SafetensorsFile(hub_tiny / file).read(name) + lora.delta(module), "BF16")
                assert np.array_equal(after, want), name
                changed += int(not np.array_equal(after, before))
            else:
                assert np.array_equal(after, before), name  # vision tower, norms, embeddings: untouched
        assert changed == len(lora.modules)
