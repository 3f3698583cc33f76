"""The matmul-saving recompute modes (crosstune.train.jax.remat) reach every decoder layer, the Gemma 4 MoE layers
too: those are crosstune's ResidualRoutedLayer (transformers' routing, crosstune.train.jax.moe), a subclass of
tunix's layer, and an exact type check passed them over, so `kernels.recompute: dots_and_attention` on the 26B-A4B
compiled the step without recompute (the v5e chip ran the two as one program: the same time and peak, its compile
read from the cache; docs/BENCHMARKS.md)."""

from __future__ import annotations

import pytest

pytest.importorskip("tunix")


@pytest.mark.parametrize("mode", ["dots", "dots_and_attention"])
def test_every_moe_layer_runs_its_own_block_under_the_policy(mode):
    from crosstune.families import get_family
    from crosstune.train.jax.model import abstract_model, make_mesh
    from crosstune.train.jax.moe import ResidualRoutedLayer
    from crosstune.train.jax.remat import save_matmuls

    family = get_family("gemma4")
    config = family.hf_config(family.spec("tiny-moe"))
    model, _ = abstract_model("gemma4", config, make_mesh(1, 1), remat=mode, platform="cpu")
    saving = "MatmulAndAttentionSaving" if mode == "dots_and_attention" else "MatmulSaving"
    names = [type(layer).__name__ for layer in model.layers]
    assert names == [f"{saving}ResidualRoutedLayer"] * len(names) and names
    assert all(isinstance(layer, ResidualRoutedLayer) for layer in model.layers)  # transformers' routing kept
    assert save_matmuls(model) == 0  # applied once: a second call leaves the layers as they are
