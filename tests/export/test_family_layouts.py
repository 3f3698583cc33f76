"""Both exports of a run on each tiny Gemma 4 architecture beyond the dense one (tiny-e: per-layer inputs and
KV-shared layers; tiny-moe: experts beside the dense MLP; tiny-unified: the 12B's gemma4_unified in the hub's
multimodal layout, its vision embedder copied untouched): the merged model and the PEFT adapter reproduce the run's
own model — PEFT's logits for a torch run (float64), the tunix model's for a jax run (fp32)."""

from __future__ import annotations

import numpy as np
import pytest

from crosstune.export import export_run, read_peft_adapter
from crosstune.run.shards import SafetensorsFile
from tests.helpers.export import assert_logits_close, hf_logits, jax_run, peft_logits, torch_run

# tests/export/test_export.py's and test_jax.py's tolerances (measured there; an adapter moves logits by > 1e-2 x)
PEFT_RELTOL, JAX_RELTOL = 5e-5, 2e-4
# transformers runs the experts through torch._grouped_mm, which has no float64: the MoE is compared in fp32, where
# x·(W + s·BA) and x·W + s·(x·A)·B differ by rounding (measured 3.1e-5 x max|logit| on tiny-moe, 6.3e-6 on tiny-e
# in float64), so its limit is 3x that; a wrong merge moves logits by > 1e-2 x
DTYPE = {"tiny-e": "float64", "tiny-moe": "float32", "tiny-unified": "float64"}
TORCH_RELTOL = {"tiny-e": PEFT_RELTOL, "tiny-moe": 1e-4, "tiny-unified": PEFT_RELTOL}
SIZES = {"tiny-e": "tiny_gemma4_e_dir", "tiny-moe": "tiny_gemma4_moe_dir", "tiny-unified": "tiny_gemma4_unified_dir"}


@pytest.mark.parametrize("size", SIZES)
def test_torch_run_exports_reproduce_peft(size, tmp_path, request):
    base = request.getfixturevalue(SIZES[size])
    run = torch_run(tmp_path / "run", base, "gemma4", rank=4, alpha=8.0)
    export_run(run, "both", tmp_path / "out")
    dtype = DTYPE[size]
    want = peft_logits(base, run / "adapter", dtype=dtype)
    assert np.abs(hf_logits(base, dtype=dtype) - want).max() > 0.1  # the adapter changes the model
    merged = hf_logits(tmp_path / "out" / "merged", dtype=dtype)
    assert_logits_close(merged, want, rel=TORCH_RELTOL[size])
    adapter = peft_logits(base, tmp_path / "out" / "adapter", dtype=dtype)
    assert_logits_close(adapter, want, rel=TORCH_RELTOL[size])
    lora, _ = read_peft_adapter(tmp_path / "out" / "adapter", family="gemma4")
    if size == "tiny-e":  # KV-shared layers 3-5: no k/v LoRA anywhere
        assert not [m for m in lora.modules if m.split(".")[2] in "345" and ("k_proj" in m or "v_proj" in m)]
    elif size == "tiny-moe":  # no tensor of the experts or the router is adapted
        assert not [m for m in lora.modules if "experts" in m or "router" in m]
    else:  # the text backbone only; the merged model keeps the vision embedder's tensors as they were
        keys = SafetensorsFile(tmp_path / "out" / "adapter" / "adapter_model.safetensors").tensors
        assert all(k.startswith("base_model.model.model.language_model.layers.") for k in keys)
        assert len(lora.modules) == 6 * 7 - 1  # no v on the k_eq_v global layer
        files = [SafetensorsFile(d / "model.safetensors") for d in (base, tmp_path / "out" / "merged")]
        vision = [n for n in files[0].tensors if "vision_embedder" in n or "embed_vision" in n]
        assert vision and all(np.array_equal(files[0].read(n), files[1].read(n)) for n in vision)


@pytest.mark.parametrize("size", SIZES)
def test_jax_run_exports_reproduce_the_tunix_model(size, tmp_path, request):
    pytest.importorskip("tunix")
    base = request.getfixturevalue(SIZES[size])
    want = jax_run(tmp_path / "run", base, "gemma4", rank=4, alpha=8.0, step=3)
    export_run(tmp_path / "run", "both", tmp_path / "out")
    merged = hf_logits(tmp_path / "out" / "merged", dtype="float32")
    assert np.abs(hf_logits(base, dtype="float32") - want).max() > 0.1
    assert_logits_close(merged, want, rel=JAX_RELTOL)
    adapter = peft_logits(base, tmp_path / "out" / "adapter", dtype="float32")
    assert_logits_close(adapter, want, rel=JAX_RELTOL)
