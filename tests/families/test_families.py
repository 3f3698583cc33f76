"""Real-size family specs against published shapes (docs/TUNIX_LAYOUT.md, "Published shapes") and the layout helpers."""

import pytest

from crosstune.families import FAMILIES, family_of_hf_config, get_family

G4 = get_family("gemma4").spec("31b")


def test_gemma4_31b_published_shapes():
    assert G4.num_layers == 60
    assert G4.layers_of("global") == list(range(5, 60, 6))
    assert (G4.hidden_size, G4.intermediate_size, G4.vocab_size) == (5376, 21504, 262144)
    sliding, global_ = G4.projection_shapes(0), G4.projection_shapes(5)
    assert sliding == {
        "q": (8192, 5376),
        "k": (4096, 5376),
        "v": (4096, 5376),
        "o": (5376, 8192),
        "gate": (21504, 5376),
        "up": (21504, 5376),
        "down": (5376, 21504),
    }
    assert global_ == {
        "q": (16384, 5376),
        "k": (2048, 5376),
        "o": (5376, 16384),
        "gate": (21504, 5376),
        "up": (21504, 5376),
        "down": (5376, 21504),
    }
    assert "v" not in global_  # k_eq_v: keys reused as values
    assert round(G4.total_params / 1e9, 2) == 30.70
    assert round(G4.embedding_params / 1e9, 2) == 1.41


@pytest.mark.parametrize(
    ("size", "layers", "hidden", "inter", "heads", "kv", "head_dim", "window", "billions"),
    [
        ("1b", 26, 1152, 6912, 4, 1, 256, 512, 1.00),
        ("4b", 34, 2560, 10240, 8, 4, 256, 1024, 3.88),
        ("12b", 48, 3840, 15360, 16, 8, 256, 1024, 11.77),
        ("27b", 62, 5376, 21504, 32, 16, 128, 1024, 27.01),
    ],
)
def test_gemma3_published_shapes(size, layers, hidden, inter, heads, kv, head_dim, window, billions):
    s = get_family("gemma3").spec(size)
    assert (s.num_layers, s.hidden_size, s.intermediate_size) == (layers, hidden, inter)
    for kind in ("sliding", "global"):
        a = s.attention[kind]
        assert (a.num_heads, a.num_kv_heads, a.head_dim, a.k_eq_v) == (heads, kv, head_dim, False)
    assert s.attention["sliding"].window == window
    assert s.layer_types.count("global") == layers // 6
    assert s.projection_shapes(0)["v"] == (kv * head_dim, hidden)
    assert round(s.total_params / 1e9, 2) == billions


def test_tp_divisibility_names_the_layer_type():
    assert G4.tp_problems(4) == []
    assert G4.tp_problems(8) == ["4 KV heads on global layers (10) not divisible by tp=8"]
    # The training rule's tp values; vLLM replicates the 4 KV heads and also takes 8 (tests/serve/test_plan.py).
    assert G4.shardable_tps(8) == [1, 2, 4]
    g27 = get_family("gemma3").spec("27b")
    assert g27.tp_problems(8) == []
    assert g27.tp_problems(32) == [
        "16 KV heads on sliding layers (52) not divisible by tp=32",
        "16 KV heads on global layers (10) not divisible by tp=32",
    ]
    # One KV head is replicated by every backend, so it never blocks tp.
    assert get_family("gemma3").spec("1b").tp_problems(4) == []


def test_flops_per_token_by_hand():
    # 2 x (projection params + LM head) + attention 4·heads·head_dim·span (span clamped to the window).
    proj = 50 * (8192 + 4096 * 2 + 8192) * 5376 + 10 * (16384 * 2 + 2048) * 5376 + 60 * 3 * 21504 * 5376
    attn = 50 * 4 * 32 * 256 * 1024 + 10 * 4 * 32 * 512 * 4096
    expected = 2 * (proj + 262144 * 5376) + attn
    assert G4.forward_flops_per_token(4096) == expected
    assert G4.lora_train_flops_per_token(4096, recompute_activations=False) == 2 * expected
    assert G4.lora_train_flops_per_token(4096, recompute_activations=True) == 3 * expected
    assert round(G4.forward_flops_per_token(4096) / 1e9, 1) == 65.8  # GFLOPs per token


def test_lora_params_skip_absent_v():
    tiny = get_family("gemma4").spec("tiny")
    r = 8
    sliding = (128 + 64) + (64 + 64) + (64 + 64) + (64 + 128)  # q, k, v, o: (out + in) per target
    global_ = (256 + 64) + (64 + 64) + (64 + 256)  # q, k, o (no v)
    mlp = 3 * (128 + 64)
    assert tiny.lora_params(r, ["q", "k", "v", "o", "gate", "up", "down"]) == r * (5 * sliding + global_ + 6 * mlp)


def test_module_names_both_stacks():
    fam = get_family("gemma4")
    tiny = fam.spec("tiny")
    names = fam.hf_lora_modules(tiny, ["q", "v"])
    assert "model.layers.5.self_attn.v_proj" not in names and "model.layers.4.self_attn.v_proj" in names
    assert fam.tunix_lora_modules(tiny, 5, ["q", "k", "v", "o"]) == [
        "attn.q_einsum",
        "attn.k_einsum",
        "attn.attn_vec_einsum",
    ]
    assert fam.tunix_lora_modules(tiny, 0, ["k", "gate"]) == ["attn.kv_einsum", "mlp.gate_proj"]
    fused = get_family("gemma3").spec("1b")  # 4 heads / 1 KV head: separate einsums
    assert get_family("gemma3").tunix_lora_modules(fused, 0, ["q", "v"]) == ["attn.q_einsum", "attn.kv_einsum"]
    import re

    rx = re.compile(fam.peft_target_regex(["q", "down"]))
    assert rx.match("model.language_model.layers.3.self_attn.q_proj")
    assert rx.match("model.layers.12.mlp.down_proj")
    assert not rx.match("model.vision_tower.encoder.layers.0.self_attn.q_proj")


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_hf_config_roundtrip(name):
    fam = FAMILIES[name]
    for size, spec in fam.sizes.items():
        cfg = fam.hf_config(spec)
        back = fam.spec_from_hf_config(cfg, name=spec.name)
        assert back == spec, size  # every field: heads, layer types, per-layer inputs, KV sharing, MoE
        assert family_of_hf_config({"model_type": "x", "text_config": cfg}) is fam


def test_unknown_family_and_size():
    with pytest.raises(KeyError, match="known: gemma3, gemma4"):
        get_family("llama")
    with pytest.raises(KeyError, match="known: e2b, e4b, 26b-a4b, 12b, 31b, tiny"):
        get_family("gemma4").spec("26b")


def test_qkv_fusion_is_gemma3_only():
    from dataclasses import replace

    from crosstune.families.spec import AttentionKind

    g3, g4 = get_family("gemma3"), get_family("gemma4")
    equal = AttentionKind("sliding", 4, 4, 16, window=32)
    spec3 = replace(g3.spec("tiny"), attention={"sliding": equal, "global": replace(equal, name="global", window=None)})
    assert g3.tunix_lora_modules(spec3, 0, ["q", "k", "v"]) == ["attn.qkv_einsum"]
    spec4 = replace(g4.spec("tiny"), attention={**g4.spec("tiny").attention, "sliding": equal})
    assert g4.tunix_lora_modules(spec4, 0, ["q", "k", "v"]) == ["attn.q_einsum", "attn.kv_einsum"]


def test_model_dir_spec_reads_config_json_once_for_everyone(tmp_path):
    """The one config.json -> ModelSpec helper: the spec of the folder, or an InputError naming the file."""
    import json

    from crosstune.errors import InputError
    from crosstune.families import FamilyMismatch, model_dir_spec

    fam = get_family("gemma4")
    tiny = fam.spec("tiny")
    folder = tmp_path / "tiny-gemma4"
    folder.mkdir()
    with pytest.raises(InputError, match=r"tiny-gemma4: no config.json"):
        model_dir_spec(folder)
    (folder / "config.json").write_text(json.dumps(fam.hf_config(tiny)))
    got = model_dir_spec(folder, "gemma4")
    assert (got.name, got.attention, got.layer_types) == ("tiny-gemma4", tiny.attention, tiny.layer_types)
    with pytest.raises(FamilyMismatch, match=r"config.json: a gemma4 model, not gemma3") as e:
        model_dir_spec(folder, "gemma3")
    assert e.value.found is fam
    (folder / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(InputError, match=r"config.json: config.json model_type 'llama' is not a supported family"):
        model_dir_spec(folder)


@pytest.mark.parametrize(
    "change",
    [
        {"layer_types": ["0x10"]},
        {"layer_types": 5},
        {"hidden_size": "drop"},
        {"num_attention_heads": None},
        {"head_dim": None},
    ],
)
def test_a_config_json_field_missing_or_of_the_wrong_kind_is_one_line_naming_the_file(tmp_path, change):
    # a layer type '0x10' was a KeyError traceback from spec_from_hf_config, and a null head count a TypeError in the
    # recipe's tp check (both found by the fuzzer): a null reads as the key missing
    import json

    from crosstune.errors import InputError
    from crosstune.families import model_dir_spec

    fam = get_family("gemma4")
    config = {**fam.hf_config(fam.spec("tiny")), **change}
    config = {k: v for k, v in config.items() if v != "drop"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    expected = r"config.json: (layer_types|not a gemma4 config crosstune reads \().+: restore it"
    if None in change.values():
        expected = rf"not a gemma4 config crosstune reads \('{next(iter(change))}' missing or unknown\): restore it"
    with pytest.raises(InputError, match=expected):
        model_dir_spec(tmp_path)


def test_a_null_text_config_is_an_absent_one(tmp_path):
    # `"text_config": null` was an AttributeError in family_of_hf_config (found by the fuzzer): the typed reader
    # reads a null as absent, and so does the one place that picks the decoder's keys (model_configs.decoder_config)
    import json

    from crosstune.families import model_dir_spec

    fam = get_family("gemma4")
    (tmp_path / "config.json").write_text(json.dumps({**fam.hf_config(fam.spec("tiny")), "text_config": None}))
    assert model_dir_spec(tmp_path).num_layers == fam.spec("tiny").num_layers
