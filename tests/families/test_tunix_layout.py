"""HF <-> Tunix weight layouts: exact round trips and the einsum identities the notes state."""

import numpy as np
import pytest

from crosstune.families import get_family
from crosstune.families import tunix_layout as tl

rng = np.random.default_rng(0)
D, N, K, H, F = 12, 4, 2, 3, 20


def test_q_projection_matches_einsum():
    w = rng.standard_normal((N * H, D))
    x = rng.standard_normal((5, D))
    kern = tl.heads_to_tunix(w, N)
    assert kern.shape == (N, D, H)
    # tunix: q[t, n, h] = sum_d x[t, d] · w[n, d, h]; HF: (x @ W.T) reshaped to heads.
    np.testing.assert_allclose(np.einsum("td,ndh->tnh", x, kern), (x @ w.T).reshape(5, N, H), atol=1e-12)
    np.testing.assert_array_equal(tl.heads_from_tunix(kern), w)


def test_kv_stack_and_split():
    k, v = rng.standard_normal((K * H, D)), rng.standard_normal((K * H, D))
    kern = tl.kv_to_tunix(k, v, K)
    assert kern.shape == (2, K, D, H)
    k2, v2 = tl.kv_from_tunix(kern)
    np.testing.assert_array_equal(k2, k)
    np.testing.assert_array_equal(v2, v)


def test_o_projection_matches_einsum():
    w = rng.standard_normal((D, N * H))
    enc = rng.standard_normal((5, N, H))
    kern = tl.o_to_tunix(w, N)
    assert kern.shape == (N, H, D)
    np.testing.assert_allclose(np.einsum("tnh,nhd->td", enc, kern), enc.reshape(5, N * H) @ w.T, atol=1e-12)
    np.testing.assert_array_equal(tl.o_from_tunix(kern), w)


def test_mlp_transpose():
    w = rng.standard_normal((F, D))
    assert tl.mlp_to_tunix(w).shape == (D, F)
    np.testing.assert_array_equal(tl.mlp_from_tunix(tl.mlp_to_tunix(w)), w)


@pytest.mark.parametrize(
    ("family", "size", "heads_equal"),
    [
        ("gemma3", "tiny", False),
        ("gemma3", "tiny", True),
        ("gemma4", "tiny", False),
        ("gemma4", "tiny", True),
        ("gemma4", "tiny-e", False),
        ("gemma4", "tiny-moe", False),
        ("gemma4", "e2b", False),
        ("gemma4", "26b-a4b", False),
    ],
)
def test_family_table_lists_the_real_tunix_parameters(family, size, heads_equal):
    """The family's declarative table gives exactly the parameter paths, shapes and shardings of tunix's own model
    (built abstractly; heads == KV heads exercises Gemma 3's fused qkv_einsum; tiny-e and e2b per-layer inputs,
    KV-shared layers (their unread K/V weights included) and the double-wide MLP; tiny-moe and 26b-a4b the MoE)."""
    from dataclasses import replace

    from flax import nnx

    from crosstune.families import get_family
    from crosstune.families.spec import AttentionKind
    from crosstune.families.tunix_config import tunix_model_class, tunix_model_config
    from crosstune.train.jax.model import make_mesh, mesh_context

    fam = get_family(family)
    spec = fam.spec(size)
    if heads_equal:  # every layer 4 heads / 4 KV heads, no k_eq_v
        equal = AttentionKind("sliding", 4, 4, 32, window=32)
        spec = replace(spec, attention={"sliding": equal, "global": replace(equal, name="global", window=None)})
    config = tunix_model_config(family, fam.hf_config(spec))
    with mesh_context(make_mesh(1, 1)):
        model = nnx.eval_shape(lambda: tunix_model_class(family)(config, rngs=nnx.Rngs(params=0)))
    real = {}
    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.Param):
            real[".".join(map(str, path))] = (tuple(node.value.shape), tuple(getattr(node, "out_sharding", None) or ()))
    table = {t.path: (t.shape, t.spec) for t in fam.tunix_tensors(spec)}
    assert sorted(table) == sorted(real)
    assert {p: s for p, (s, _) in table.items()} == {p: s for p, (s, _) in real.items()}
    # tunix annotates the sharded parameters; the table's spec must match wherever tunix gives one
    mismatched = {p: (table[p][1], r) for p, (_, r) in real.items() if r and r != table[p][1]}
    assert not mismatched
    fused = any(p.endswith("qkv_einsum.w") for p in table)
    assert fused == (heads_equal and family == "gemma3") == fam.fuses_qkv(spec.kind(0))


@pytest.mark.parametrize(("family", "size"), [(f, s) for f in ("gemma3", "gemma4") for s in get_family(f).sizes])
def test_the_tables_hf_view_holds_every_parameter_of_the_size(family, size):
    """`hf_tensors`, the HF checkpoint the table describes (what the numpy writer of `model build` writes), holds
    exactly the spec's parameters (counted from its dimensions, elsewhere), plus Gemma 4's layer scalars (buffers the
    count leaves out); no tensor twice, none of a KV-shared layer's K/V, no head (tied)."""
    import math

    spec = get_family(family).spec(size)
    tensors = get_family(family).tunix.hf_tensors(spec)
    names = [t.name for t in tensors]
    scalars = [n for n in names if n.endswith("layer_scalar")]
    assert len(names) == len(set(names)) and "embed_tokens.weight" in names and "lm_head.weight" not in names
    assert sum(math.prod(t.shape) for t in tensors) == spec.total_params + len(scalars)
    assert len(scalars) == (spec.num_layers if family == "gemma4" else 0)
    for i in range(spec.num_layers):
        has_k = f"layers.{i}.self_attn.k_proj.weight" in names
        assert has_k != spec.kv_shared(i)
    embed = dict(zip(names, tensors, strict=True))["embed_tokens.weight"]
    assert embed.shape == (spec.vocab_size, spec.hidden_size) and embed.axes == ("V", "D")
