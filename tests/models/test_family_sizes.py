"""`crosstune model build --family gemma4 --size {e2b,e4b,26b-a4b,12b} --layers 2`: a checkpoint of the size's true
dimensions (a small vocabulary: the tokenizer of 262,144 entries is the slow part, not what is checked) that
transformers loads and tunix loads through crosstune's table, with the same logits in fp32. The 12B in the hub's
layout (Gemma4UnifiedForConditionalGeneration), as Google publishes it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.helpers.export import assert_logits_close

VOCAB = 2048
# fp32 on both sides from the same bf16 weights, other op order; what tests/train/jax/test_hf_parity.py allows
RELTOL = 2e-4


LAYOUT = {"12b": "multimodal"}  # the others: causal


def _build(size: str, out, corpus) -> None:
    from crosstune.cli import _register, app

    _register()
    args = [
        "model",
        "build",
        "--family",
        "gemma4",
        "--size",
        size,
        "--layers",
        "2",
        "--vocab",
        str(VOCAB),
        "--out",
        str(out),
        "--corpus",
        str(corpus),
        "--layout",
        LAYOUT.get(size, "causal"),
    ]
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, args)
    assert result.exit_code == 0, result.output


def _logits_both(model_dir, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import jax.numpy as jnp
    import torch
    import transformers

    from crosstune.train.jax.loss import attention_mask
    from crosstune.train.jax.model import build_model, make_mesh, mesh_context

    hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = hf(torch.tensor(tokens), use_cache=False).logits.numpy()
    del hf
    mesh = make_mesh(1, 1)
    model, _ = build_model("gemma4", model_dir, mesh, dtype="float32")
    b, length = tokens.shape
    with mesh_context(mesh):
        got, _ = model(
            jnp.asarray(tokens),
            jnp.tile(jnp.arange(length)[None], (b, 1)),
            None,
            attention_mask(jnp.ones((b, length), jnp.int32)),
        )
    return np.asarray(got), ref


@pytest.mark.parametrize(
    "size",
    [
        "e2b",
        pytest.param("e4b", marks=pytest.mark.slow),
        pytest.param("26b-a4b", marks=pytest.mark.slow),
        pytest.param("12b", marks=pytest.mark.slow),
    ],
)
def test_a_two_layer_build_of_each_size_loads_in_both_stacks(size, tmp_path, synth_corpus_dir):
    pytest.importorskip("tunix")
    from crosstune.families import get_family, model_dir_spec

    out = tmp_path / size
    _build(size, out, synth_corpus_dir)
    spec, real = model_dir_spec(out, "gemma4"), get_family("gemma4").spec(size)
    assert (spec.num_layers, spec.layer_types, spec.vocab_size) == (2, ("sliding", "global"), VOCAB)
    assert (spec.hidden_size, spec.attention, spec.moe, spec.per_layer_input_dim) == (
        real.hidden_size,
        real.attention,
        real.moe,
        real.per_layer_input_dim,
    )
    assert spec.kv_shared_layers == 0  # two layers can't share K/V the same way on both stacks
    config = json.loads((out / "config.json").read_text())
    assert config["dtype"] == "bfloat16" and spec.unified == real.unified
    if size == "12b":
        assert config["architectures"] == ["Gemma4UnifiedForConditionalGeneration"]
    tokens = np.random.default_rng(0).integers(3, VOCAB, size=(1, 24))
    got, ref = _logits_both(out, tokens)
    assert_logits_close(got, ref, rel=RELTOL)
