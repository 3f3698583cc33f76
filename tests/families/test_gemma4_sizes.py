"""The Gemma 4 family's sizes against the published configs, Tunix 0.1.7's classmethods and transformers' model.

Published values: MaxText's src/maxtext/configs/models/gemma4-{e2b,e4b,26b}.yml (the hub's config.json values),
Google's model card totals (26B-A4B: 25.2 B parameters, 3.8 B active). The 12B ("unified"): google/gemma-4-12B-it's
text config as transformers 5.12.1's gemma4_unified documents it (Gemma4UnifiedTextConfig's fields; built on the
meta device below); tunix 0.1.7 has no 12B classmethod."""

import dataclasses

import pytest

from crosstune.families import get_family
from crosstune.models.build import sized_spec

FAM = get_family("gemma4")

# (layers, hidden, mlp, heads, kv heads, global kv heads, head_dim, global head_dim, window, k_eq_v, global every,
#  per-layer input, kv-shared layers, double-wide mlp, (experts, top-k, expert width))
PUBLISHED = {
    "e2b": (35, 1536, 6144, 8, 1, 1, 256, 512, 512, False, 5, 256, 20, True, None),
    "e4b": (42, 2560, 10240, 8, 2, 2, 256, 512, 512, False, 6, 256, 18, False, None),
    "26b-a4b": (30, 2816, 2112, 16, 8, 2, 256, 512, 1024, True, 6, 0, 0, False, (128, 8, 704)),
    "12b": (48, 3840, 15360, 16, 8, 1, 256, 512, 1024, True, 6, 0, 0, False, None),
}


@pytest.mark.parametrize("size", PUBLISHED)
def test_sizes_have_the_published_dimensions(size):
    s = FAM.spec(size)
    layers, d, f, n, kv, gkv, h, gh, window, k_eq_v, every, ple, shared, wide, moe = PUBLISHED[size]
    sl, gl = s.attention["sliding"], s.attention["global"]
    assert (s.num_layers, s.hidden_size, s.intermediate_size, s.vocab_size) == (layers, d, f, 262144)
    assert (sl.num_heads, sl.num_kv_heads, sl.head_dim, sl.window) == (n, kv, h, window)
    assert (gl.num_heads, gl.num_kv_heads, gl.head_dim, gl.k_eq_v) == (n, gkv, gh, k_eq_v)
    assert s.layers_of("global") == list(range(every - 1, layers, every))
    assert (s.per_layer_input_dim, s.kv_shared_layers, s.double_wide_shared_mlp) == (ple, shared, wide)
    assert (None if s.moe is None else (s.moe.num_experts, s.moe.top_k, s.moe.expert_dim)) == moe
    assert s.final_logit_softcap == 30.0


def test_totals_and_active_parameters():
    moe = FAM.spec("26b-a4b")
    assert (round(moe.total_params / 1e9, 1), round(moe.active_params / 1e9, 1)) == (25.2, 3.8)
    e2b = FAM.spec("e2b")
    assert e2b.active_params == e2b.total_params
    assert e2b.per_layer_embedding_params == 262144 * 35 * 256  # 2.35 B of E2B's 4.63 B are a lookup table
    # the KV-shared layers: no k/v projections, E2B's MLP twice as wide there
    assert set(e2b.projection_shapes(14)) == {"q", "k", "o", "gate", "up", "down"} | {"v"}
    assert set(e2b.projection_shapes(15)) == {"q", "o", "gate", "up", "down"}
    assert e2b.projection_shapes(15)["gate"] == (12288, 1536) and e2b.projection_shapes(14)["gate"] == (6144, 1536)
    assert [e2b.kv_source(i) for i in (15, 19, 34)] == [13, 14, 14]  # the last sliding / global unshared layer


# Tunix 0.1.7's own configs: crosstune's mapping of each size's HF config must give exactly these fields.
TUNIX_CONFIGS = {"e2b": "gemma4_e2b", "e4b": "gemma4_e4b", "26b-a4b": "gemma4_26b_a4b", "31b": "gemma4_31b"}


@pytest.mark.parametrize("size", TUNIX_CONFIGS)
def test_hf_config_maps_to_tunix_classmethod(size):
    pytest.importorskip("tunix")
    from tunix.models.gemma4 import model as tunix_gemma4

    from crosstune.families.tunix_config import tunix_model_config

    ours = tunix_model_config("gemma4", FAM.hf_config(FAM.spec(size)))
    ref = getattr(tunix_gemma4.ModelConfig, TUNIX_CONFIGS[size])()
    layers = ref.num_layers
    cycle = ref.attention_pattern
    assert ours.attention_pattern == tuple(cycle[i % len(cycle)] for i in range(layers))  # tunix cycles its tuple
    differ = {
        f.name: (getattr(ours, f.name), getattr(ref, f.name))
        for f in dataclasses.fields(ref)
        if f.name not in ("attention_pattern", "shd_config") and getattr(ours, f.name) != getattr(ref, f.name)
    }
    assert differ == {}


@pytest.mark.parametrize("size", ["e2b", "e4b", "26b-a4b", "12b", "tiny-e", "tiny-moe", "tiny-unified"])
def test_transformers_builds_what_the_spec_counts(size):
    """Gemma4TextConfig (the 12B: Gemma4UnifiedTextConfig) from the family's HF config, the model on the meta device
    (nothing allocated): every parameter's shape and the total are the spec's."""
    torch = pytest.importorskip("torch")
    import transformers

    spec = FAM.spec(size)
    hf = FAM.hf_config(spec)
    config = transformers.CONFIG_MAPPING[hf.pop("model_type")](**hf)
    with torch.device("meta"):
        model = getattr(transformers, FAM.hf_arch(spec).causal_lm_class)(config)
    params = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert sum(torch.Size(s).numel() for s in params.values()) == spec.total_params
    names = {
        "q": "self_attn.q_proj",
        "k": "self_attn.k_proj",
        "v": "self_attn.v_proj",
        "o": "self_attn.o_proj",
        "gate": "mlp.gate_proj",
        "up": "mlp.up_proj",
        "down": "mlp.down_proj",
    }
    for layer in range(spec.num_layers):
        found = {
            t: params[f"model.layers.{layer}.{m}.weight"]
            for t, m in names.items()
            if f"model.layers.{layer}.{m}.weight" in params
        }
        assert found == spec.projection_shapes(layer), layer
    if spec.moe is not None:
        e, x, d = spec.moe.num_experts, spec.moe.expert_dim, spec.hidden_size
        assert params["model.layers.0.experts.gate_up_proj"] == (e, 2 * x, d)
        assert params["model.layers.0.experts.down_proj"] == (e, d, x)


def test_kv_sharing_rule_is_tunix_rule():
    """`kv_sharing_ok` is true exactly where tunix's own sharing pattern equals transformers' (spec.kv_source)."""
    pytest.importorskip("tunix")
    from tunix.models.gemma4 import model as tunix_gemma4

    from crosstune.families.base import gemma_layer_pattern

    kinds = {"sliding": tunix_gemma4.AttentionType.LOCAL_SLIDING, "global": tunix_gemma4.AttentionType.GLOBAL}
    base = FAM.spec("tiny-e")
    checked = agreed = 0
    for every in (2, 3, 5, 6):
        for layers in range(2, 15):
            types = gemma_layer_pattern(layers, every)
            for shared in range(layers):
                spec = dataclasses.replace(base, layer_types=types, kv_shared_layers=shared)
                try:
                    hf = [spec.kv_source(i) for i in range(layers)]
                except ValueError:  # transformers has no earlier layer of that type to share
                    hf = None
                tunix = tunix_gemma4.create_kv_cache_sharing_patterns(
                    layers, shared / layers, True, True, tuple(kinds[t] for t in types)
                )
                ok = FAM.tunix.kv_sharing_ok(types, shared)
                assert ok == (hf == tunix), (every, layers, shared)
                checked, agreed = checked + 1, agreed + ok
    assert checked == 416 and 0 < agreed < checked


@pytest.mark.parametrize(
    ("size", "layers", "pattern", "shared"),
    [
        ("e2b", 2, "sg", 0),
        ("e2b", 10, "ssssgssssg", 5),
        ("e4b", 12, "sssssgsssssg", 6),
        ("26b-a4b", 2, "sg", 0),
        ("e4b", None, "sssssg" * 7, 18),
    ],
)
def test_fewer_layers_keep_the_period_and_a_shareable_kv_count(size, layers, pattern, shared):
    spec = sized_spec("gemma4", size, layers)
    assert "".join(t[0] for t in spec.layer_types) == pattern
    assert spec.kv_shared_layers == shared
    assert FAM.tunix.kv_sharing_ok(spec.layer_types, spec.kv_shared_layers)


def test_a_shallow_e_model_keeps_about_its_kv_shared_fraction():
    """E4B: the last 18 of 42 layers are KV-shared. The planner's first-N-layer spec (a shallow compile screen, also
    what `train.jax.aot.hf_config` writes as num_kv_shared_layers) keeps about that fraction at a count tunix
    shares as transformers does: 12 layers → 12 × 18/42 = 5.1 wanted, 6 is the nearest that shares alike (layers
    6-11 take the K/V of layers 4 and 5, as in both stacks). Keeping 18 made every cut under 19 layers
    invalid, so no shallow screen of an E model compiled."""
    from crosstune.families.gemma4.tunix import kv_sharing_ok
    from crosstune.planner.aot_report import with_layers

    spec = FAM.spec("e4b")
    cuts = {layers: with_layers(spec, layers) for layers in (2, 6, 12, 24)}
    assert {n: s.kv_shared_layers for n, s in cuts.items()} == {2: 0, 6: 0, 12: 6, 24: 12}
    assert all(kv_sharing_ok(s.layer_types, s.kv_shared_layers) for s in cuts.values())
    assert with_layers(spec, 42) is spec and spec.kv_shared_layers == 18


def test_the_12b_is_the_unified_architecture():
    """11.9 B parameters; transformers' gemma4_unified classes, with the config's defaults where the spec is silent
    (vocabulary, rope: θ 1e4 sliding, proportional 0.25 with θ 1e6 global, the 5:1 pattern ending global)."""
    transformers = pytest.importorskip("transformers")
    spec = FAM.spec("12b")
    assert spec.unified and round(spec.total_params / 1e9, 1) == 11.9
    arch = FAM.hf_arch(spec)
    assert (arch.model_type, arch.multimodal_model) == ("gemma4_unified_text", "Gemma4UnifiedForConditionalGeneration")
    hf = FAM.hf_config(spec)
    defaults = transformers.Gemma4UnifiedTextConfig(num_hidden_layers=48)
    assert hf["vocab_size"] == defaults.vocab_size and hf["rope_parameters"] == defaults.rope_parameters
    assert hf["layer_types"] == defaults.layer_types and hf["sliding_window"] == defaults.sliding_window
    assert hf["global_head_dim"] == defaults.global_head_dim
    assert FAM.spec_from_hf_config(hf, name=spec.name) == spec  # the config reads back as the 12B (unified)
    assert not FAM.spec_from_hf_config(FAM.hf_config(FAM.spec("31b")), name="31b").unified


def test_the_12b_tunix_config_is_the_31b_structure_at_its_dimensions():
    """Tunix 0.1.7 ships no 12B: crosstune's mapping of its config must be the 31B classmethod's (k_eq_v globals,
    proportional global rope, 5:1 pattern, softcap) with only the dimensions changed."""
    pytest.importorskip("tunix")
    from tunix.models.gemma4 import model as tunix_gemma4

    from crosstune.families.tunix_config import tunix_model_config

    ours = tunix_model_config("gemma4", FAM.hf_config(FAM.spec("12b")))
    ref = dataclasses.replace(
        tunix_gemma4.ModelConfig.gemma4_31b(),
        num_layers=48,
        embed_dim=3840,
        hidden_dim=15360,
        num_heads=16,
        num_kv_heads=8,
        num_global_kv_heads=1,
    )
    assert ours.attention_pattern == tuple(ref.attention_pattern[i % 6] for i in range(48))
    differ = {
        f.name: (getattr(ours, f.name), getattr(ref, f.name))
        for f in dataclasses.fields(ref)
        if f.name not in ("attention_pattern", "shd_config") and getattr(ours, f.name) != getattr(ref, f.name)
    }
    assert differ == {}
