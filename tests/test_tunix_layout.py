"""HF <-> Tunix weight layouts: exact round trips and the einsum identities the notes state."""

import numpy as np

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
