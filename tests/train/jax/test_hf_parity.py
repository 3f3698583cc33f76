"""HF checkpoint -> tunix model: the same logits as transformers (fp32, CPU), both families, sharded or not."""

import numpy as np
import pytest

from tests.helpers.export import assert_logits_close

# JAX vs HF in fp32 (other op order): measured <= 4.8e-5 x max|logit|; a LoRA moves logits by > 1e-2 x.
RELTOL = 2e-4

pytest.importorskip("tunix")

B, L = 2, 40  # longer than the tiny models' sliding window (32): both attention types are exercised


def _hf_logits(model_dir, tokens: np.ndarray) -> np.ndarray:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, attn_implementation="eager", dtype=torch.float32
    ).eval()
    with torch.no_grad():
        return model(torch.tensor(tokens), use_cache=False).logits.numpy()


def _tunix_logits(family: str, model_dir, tokens: np.ndarray, fsdp: int, tp: int) -> tuple[np.ndarray, list]:
    import jax.numpy as jnp

    from crosstune.train.jax.loss import attention_mask
    from crosstune.train.jax.model import build_model, make_mesh, mesh_context

    mesh = make_mesh(fsdp, tp)
    model, replicated = build_model(family, model_dir, mesh, dtype="float32")
    positions = jnp.tile(jnp.arange(L)[None], (B, 1))
    with mesh_context(mesh):
        logits, _ = model(jnp.asarray(tokens), positions, None, attention_mask(jnp.ones((B, L), jnp.int32)))
    return np.asarray(logits), replicated


@pytest.mark.parametrize(
    ("family", "fsdp", "tp"),
    [("gemma3", 1, 1), ("gemma4", 1, 1), ("gemma4", 2, 4)],  # (2, 4): 2 sliding KV heads + 1 global, replicated
)
def test_tunix_logits_match_transformers(family, fsdp, tp, request):
    model_dir = request.getfixturevalue(f"tiny_{family}_dir")
    tokens = np.random.default_rng(0).integers(3, 1000, size=(B, L))
    ref = _hf_logits(model_dir, tokens)
    got, replicated = _tunix_logits(family, model_dir, tokens, fsdp, tp)
    assert got.shape == ref.shape
    assert_logits_close(got, ref, rel=RELTOL)
    assert bool(replicated) == (tp > 1)


def test_gemma4_text_only_prefix_is_found(tiny_gemma4_dir):
    """Gemma4ForCausalLM.save_pretrained writes `model.layers.*`, which tunix 0.1.7's own loader skips."""
    from crosstune.families.tunix_weights import CheckpointReader

    reader = CheckpointReader(tiny_gemma4_dir)
    assert reader.prefix == "model."
    assert reader.get("layers.5.self_attn.k_proj.weight").shape == (64, 64)  # 1 global KV head × head_dim 64
