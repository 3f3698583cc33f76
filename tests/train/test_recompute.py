"""`train.kernels.recompute` means one thing on both backends or is refused by the one that can't do it: `dots` (keep
the weight matmuls' outputs) and `dots_and_attention` (and splash's) are the jax backend's, `selective` (keep
PyTorch's SDPA outputs) the torch backend's; and the jax side's constants that the planner mirrors stay equal to it."""

from __future__ import annotations

import pytest

from crosstune.recipe import RecipeError
from crosstune.recipe.schema import TrainSection
from tests.helpers.paths import REPO

G4 = REPO / "recipes" / "gemma4-31b-tpu-v5p-8.yaml"


def _train(**kernels) -> TrainSection:
    return TrainSection(gradient_checkpointing=True, kernels=kernels)


def test_jax_modes():
    pytest.importorskip("tunix")
    from crosstune.train.jax.config import remat_mode

    assert remat_mode(TrainSection(gradient_checkpointing=False)) is None
    assert remat_mode(_train()) == "full" and remat_mode(_train(recompute="dots")) == "dots"
    assert remat_mode(_train(recompute="dots_and_attention")) == "dots_and_attention"
    with pytest.raises(ValueError, match="'selective' keeps PyTorch SDPA kernels' outputs .* dots_and_attention"):
        remat_mode(_train(recompute="selective"))


def test_torch_refuses_dots_and_keeps_its_own():
    pytest.importorskip("torch")
    from crosstune.train.torch.layers import gradient_checkpointing_kwargs

    assert gradient_checkpointing_kwargs(_train(recompute="selective").kernels)["selective"] is True
    for jax_only in ("dots", "dots_and_attention"):
        with pytest.raises(ValueError, match=f"'{jax_only}' is the jax backend's matmul-saving policy"):
            gradient_checkpointing_kwargs(_train(recompute=jax_only).kernels)


def test_dots_needs_gradient_checkpointing():
    from crosstune.recipe import load_recipe

    with pytest.raises(RecipeError, match="kernels.recompute 'dots' chooses what gradient_checkpointing recomputes"):
        load_recipe(G4, ["train.gradient_checkpointing=false", "train.kernels.recompute=dots"])
    dots = load_recipe(G4, ["train.gradient_checkpointing=true", "train.kernels.recompute=dots"])
    assert dots.train.kernels.recomputes_attention  # dots runs the attention again


def test_dots_and_attention_keeps_a_kernel_s_outputs_so_needs_splash():
    from crosstune.recipe import load_recipe

    keep = ["train.gradient_checkpointing=true", "train.kernels.recompute=dots_and_attention"]
    kernels = load_recipe(G4, keep).train.kernels  # the 31B's recipe runs splash
    assert not kernels.recomputes_attention and not kernels.recomputes_matmuls
    with pytest.raises(
        RecipeError, match="'dots_and_attention' keeps the splash kernel's outputs.*'dense'.*or recompute dots"
    ):
        load_recipe(G4, [*keep, "backend.jax.attention=dense"])


def test_the_planner_prices_the_jax_loss_chunk_it_runs():
    pytest.importorskip("tunix")
    from crosstune.planner.activations import JAX_LOGITS_CHUNK
    from crosstune.train.jax.logits import CHUNK

    assert JAX_LOGITS_CHUNK == CHUNK
