"""serve.support: the attention backend each layer type gets per target, and where LoRA adapters are served."""

from __future__ import annotations

from pathlib import Path

import pytest

from crosstune.families import get_family
from crosstune.hardware import HARDWARE
from crosstune.recipe import load_recipe
from crosstune.serve.plan import serve_plan
from crosstune.serve.support import attention_backends, lora_serving
from tests.helpers.paths import RECIPES

G4_31B = get_family("gemma4").spec("31b")
G3_27B = get_family("gemma3").spec("27b")


@pytest.mark.parametrize(
    ("spec", "target", "kv", "backends"),
    [
        (G4_31B, "2xh100", "auto", {"sliding": "FA4, else TRITON_ATTN", "global": "FA4, else TRITON_ATTN"}),
        (G4_31B, "1xh200", "fp8", {"sliding": "FA3", "global": "FA4"}),  # SM90 + fp8 KV: per layer
        (G4_31B, "1xa100", "auto", {"sliding": "TRITON_ATTN", "global": "TRITON_ATTN"}),  # no FA4 on Ampere
        (G4_31B, "tpu-v6e-8", "auto", {"sliding": "ragged paged attention", "global": "ragged paged attention"}),
        (G3_27B, "1xa100", "auto", {"sliding": "FLASH_ATTN", "global": "FLASH_ATTN"}),  # one head_dim
    ],
)
def test_attention_backend_per_layer_type(spec, target, kv, backends):
    got = attention_backends(spec, HARDWARE[target], kv)
    assert {a.layer_type: a.backend for a in got} == backends
    if target == "1xa100" and spec is G4_31B:
        assert "vllm #38887" in got[0].why


def test_lora_on_tpu_needs_the_torchax_path_and_the_plan_sets_it():
    tpu, gpu = lora_serving(HARDWARE["tpu-v6e-8"]), lora_serving(HARDWARE["2xh100"])
    assert tpu.env == {"MODEL_IMPL_TYPE": "vllm"} and "1.62 vs 1.80 req/s" in tpu.why and "merged export" in tpu.why
    assert gpu.env == {} and gpu.adapters
    r = load_recipe(RECIPES / "gemma4-31b-2xh100.yaml")
    on_tpu = serve_plan(r, "tpu-v6e-8", adapter=Path("/a"), adapter_rank=64)
    assert on_tpu.command().startswith("MODEL_IMPL_TYPE=vllm vllm serve ")
    assert "-e MODEL_IMPL_TYPE=vllm " in on_tpu.docker and on_tpu.env_why["MODEL_IMPL_TYPE"] == tpu.why
    merged = serve_plan(r, "tpu-v6e-8")  # no adapter: the JAX path, nothing set
    assert "MODEL_IMPL_TYPE" not in merged.command() and "MODEL_IMPL_TYPE" not in merged.docker
    assert "MODEL_IMPL_TYPE" not in serve_plan(r, "2xh100", adapter=Path("/a"), adapter_rank=64).docker
