"""Qwix LoRA <-> PEFT LoRA: each module's delta computed the Qwix way (its einsum) equals the PEFT way (x @ (B@A).T),
the round trips are exact, and independent PEFT k/v LoRAs import exactly as a block LoRA (synthetic arrays, no
backend)."""

import numpy as np
import pytest

from crosstune.families.lora_layout import (
    LoraLayoutError,
    _off_diagonal,
    fused_block_mask,
    peft_to_qwix,
    qwix_to_peft,
)
from crosstune.families.spec import AttentionKind

rng = np.random.default_rng(0)
D, F, N, K, H, R, T = 12, 20, 4, 2, 3, 5, 7
KIND = AttentionKind("sliding", N, K, H)
KIND_QKV = AttentionKind("sliding", N, N, H)


def rand(*shape):
    return rng.standard_normal(shape)


def peft_out(x, a, b):
    """HF nn.Linear LoRA delta: x @ (B @ A).T."""
    return x @ (b @ a).T


# Qwix's LoRA einsums (qwix._parse_einsum_str_for_lora applied to tunix's einsum strings).
def qwix_delta(module, x, a, b):
    if module in ("attn.q_einsum", "attn.k_einsum"):
        return np.einsum("td,dr,rnh->tnh", x, a, b)
    if module == "attn.kv_einsum" or module == "attn.qkv_einsum":
        return np.einsum("td,dr,rcnh->ctnh", x, a, b)
    if module == "attn.attn_vec_einsum":
        return np.einsum("tnh,nhr,rd->td", x, a, b)
    return x @ a @ b  # nnx.Linear through dot_general: A (in, r), B (r, out)


CASES = [
    ("attn.q_einsum", (D, R), (R, N, H), KIND),
    ("attn.k_einsum", (D, R), (R, K, H), KIND),
    ("attn.attn_vec_einsum", (N, H, R), (R, D), KIND),
    ("mlp.gate_proj", (D, R), (R, F), KIND),
    ("mlp.up_proj", (D, R), (R, F), KIND),
    ("mlp.down_proj", (F, R), (R, D), KIND),
]


@pytest.mark.parametrize(("module", "a_shape", "b_shape", "kind"), CASES, ids=[c[0] for c in CASES])
def test_single_module_delta_and_round_trip(module, a_shape, b_shape, kind):
    a, b = rand(*a_shape), rand(*b_shape)
    ((target, (pa, pb)),) = qwix_to_peft(module, a, b, kind, D, F, R).items()
    x = rand(T, F if target == "down" else (N * H if target == "o" else D))
    xq = x.reshape(T, N, H) if target == "o" else x
    want = qwix_delta(module, xq, a, b).reshape(T, -1)
    np.testing.assert_allclose(peft_out(x, pa, pb), want, atol=1e-10)
    a2, b2 = peft_to_qwix(module, {target: (pa, pb)}, kind, D, F)
    np.testing.assert_array_equal(a2, a)
    np.testing.assert_array_equal(b2, b)


@pytest.mark.parametrize(
    ("module", "kind", "comps"), [("attn.kv_einsum", KIND, "kv"), ("attn.qkv_einsum", KIND_QKV, "qkv")]
)
def test_fused_shared_a_splits_into_components(module, kind, comps):
    heads = kind.num_kv_heads
    a, b = rand(D, R), rand(R, len(comps), heads, H)
    pairs = qwix_to_peft(module, a, b, kind, D, F, R)
    assert list(pairs) == list(comps)
    x = rand(T, D)
    want = qwix_delta(module, x, a, b)
    for i, t in enumerate(comps):
        np.testing.assert_array_equal(pairs[t][0], a.T)  # the one shared A
        np.testing.assert_allclose(peft_out(x, *pairs[t]), want[i].reshape(T, -1), atol=1e-10)
    a2, b2 = peft_to_qwix(module, pairs, kind, D, F)  # equal A matrices -> back to the shared rank-r form
    np.testing.assert_array_equal(a2, a)
    np.testing.assert_array_equal(b2, b)


def test_independent_kv_import_is_an_exact_block_lora():
    pk, pv = (rand(R, D), rand(K * H, R)), (rand(R, D), rand(K * H, R))
    a, b = peft_to_qwix("attn.kv_einsum", {"k": pk, "v": pv}, KIND, D, F)
    assert a.shape == (D, 2 * R) and b.shape == (2 * R, 2, K, H)
    x = rand(T, D)
    out = qwix_delta("attn.kv_einsum", x, a, b)
    np.testing.assert_allclose(out[0].reshape(T, -1), peft_out(x, *pk), atol=1e-10)
    np.testing.assert_allclose(out[1].reshape(T, -1), peft_out(x, *pv), atol=1e-10)
    mask = fused_block_mask("attn.kv_einsum", b.shape, R)
    assert mask is not None and not _off_diagonal(b, R).any() and (b * mask == b).all()
    assert mask.sum() == R * K * H * 2  # two diagonal blocks of R × (K, H)
    back = qwix_to_peft("attn.kv_einsum", a, b, KIND, D, F, R)  # zero off-diagonal -> each its own rank-R pair
    for t, p in (("k", pk), ("v", pv)):
        np.testing.assert_array_equal(back[t][0], p[0])
        np.testing.assert_array_equal(back[t][1], p[1])


def test_trained_block_lora_exports_exactly_at_full_width():
    """Off-diagonal blocks that trained away from zero: every component gets the whole A, at rank 2R."""
    a, b = rand(D, 2 * R), rand(2 * R, 2, K, H)
    pairs = qwix_to_peft("attn.kv_einsum", a, b, KIND, D, F, R)
    x = rand(T, D)
    want = qwix_delta("attn.kv_einsum", x, a, b)
    for i, t in enumerate("kv"):
        assert pairs[t][0].shape == (2 * R, D)
        np.testing.assert_allclose(peft_out(x, *pairs[t]), want[i].reshape(T, -1), atol=1e-10)


def test_k_only_import_zero_v_and_qkv_partial_blocks():
    pk = (rand(R, D), rand(K * H, R))
    a, b = peft_to_qwix("attn.kv_einsum", {"k": pk}, KIND, D, F)
    assert a.shape == (D, R) and not b[:, 1].any()  # v gets no LoRA: exact with the shared form
    pq, pv = (rand(R, D), rand(N * H, R)), (rand(R, D), rand(N * H, R))
    a, b = peft_to_qwix("attn.qkv_einsum", {"q": pq, "v": pv}, KIND_QKV, D, F)
    assert a.shape == (D, 3 * R)
    back = qwix_to_peft("attn.qkv_einsum", a, b, KIND_QKV, D, F, R)
    assert set(back) == {"q", "v"}  # the empty k block is no LoRA
    np.testing.assert_array_equal(back["v"][1], pv[1])


def test_shape_errors_name_the_tensor():
    with pytest.raises(LoraLayoutError, match=r"layers.3.attn.q_einsum.w_lora_b: shape \(5, 4, 4\)"):
        qwix_to_peft("attn.q_einsum", rand(D, R), rand(R, N, H + 1), KIND, D, F, R, where="layers.3.attn.q_einsum.w")
    with pytest.raises(LoraLayoutError, match="unconsumed"):
        qwix_to_peft("attn.mystery_einsum", rand(D, R), rand(R, D), KIND, D, F, R)
    with pytest.raises(LoraLayoutError, match=r"\(v\) lora_B"):
        peft_to_qwix("attn.kv_einsum", {"k": (rand(R, D), rand(K * H, R)), "v": (rand(R, D), rand(K, R))}, KIND, D, F)
