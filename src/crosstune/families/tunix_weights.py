"""Tunix parameter <- HF safetensors tensor, one tensor at a time (streams a 31B checkpoint through host RAM).

Prefixes: official multimodal checkpoints store the decoder under `model.language_model.`, text-only
`Gemma*ForCausalLM.save_pretrained` under `model.` (tunix 0.1.7's Gemma 4 loader skips the latter: every key,
with only a warning). Both are found here, by looking for the embedding.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from crosstune.errors import read_model_config
from crosstune.families.tunix_layout import NORM_NAMES, heads_to_tunix, mlp_to_tunix, o_to_tunix

PREFIXES = ("model.language_model.", "language_model.model.", "model.", "")
_TUNIX_NORMS = {v: k for k, v in NORM_NAMES.items()}  # tunix module path -> HF module path
_LAYER = re.compile(r"layers\.(\d+)\.(.+)")


class CheckpointReader:
    """Lazy access to the tensors of an HF checkpoint directory (one or several .safetensors files)."""

    def __init__(self, model_dir: Path):
        from safetensors import safe_open

        self.dir = Path(model_dir)
        files = sorted(self.dir.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors in {self.dir}")
        self._open = {f: safe_open(str(f), framework="numpy") for f in files}
        self._where = {k: f for f, h in self._open.items() for k in h.keys()}
        self.prefix = next((p for p in PREFIXES if f"{p}embed_tokens.weight" in self._where), None)
        if self.prefix is None:
            raise KeyError(f"{self.dir}: no embed_tokens.weight under any of the prefixes {PREFIXES}")

    def config(self) -> dict:
        return read_model_config(self.dir)

    def has(self, name: str) -> bool:
        return self.prefix + name in self._where

    def get(self, name: str) -> np.ndarray:
        key = self.prefix + name
        if key not in self._where:
            raise KeyError(f"{self.dir}: tensor {key!r} missing (needed for the tunix model)")
        return self._open[self._where[key]].get_tensor(key)


def _heads(reader: CheckpointReader, hf: str, n: int) -> np.ndarray:
    return heads_to_tunix(reader.get(f"{hf}.weight"), n)


def tunix_tensor(reader: CheckpointReader, path: str, shape: tuple[int, ...]) -> np.ndarray:
    """The value of tunix parameter `path` (dotted, e.g. `layers.5.attn.k_einsum.w`) with shape `shape`."""
    if path == "embedder.input_embedding":
        return reader.get("embed_tokens.weight")
    if path == "final_norm.scale":
        return reader.get("norm.weight")
    m = _LAYER.fullmatch(path)
    if m is None:
        raise KeyError(f"no HF source known for tunix parameter {path!r}")
    layer, rest = m.groups()
    attn = f"layers.{layer}.self_attn"
    builders: dict[str, Callable[[], np.ndarray]] = {
        "attn.q_einsum.w": lambda: _heads(reader, f"{attn}.q_proj", shape[0]),
        "attn.k_einsum.w": lambda: _heads(reader, f"{attn}.k_proj", shape[0]),  # k_eq_v: values reuse keys
        "attn.kv_einsum.w": lambda: np.stack([_heads(reader, f"{attn}.{p}_proj", shape[1]) for p in "kv"]),
        "attn.qkv_einsum.w": lambda: np.stack([_heads(reader, f"{attn}.{p}_proj", shape[1]) for p in "qkv"]),
        "attn.attn_vec_einsum.w": lambda: o_to_tunix(reader.get(f"{attn}.o_proj.weight"), shape[0]),
        "skip_scale": lambda: reader.get(f"layers.{layer}.layer_scalar").reshape(shape),
    }
    for proj in ("gate", "up", "down"):
        builders[f"mlp.{proj}_proj.kernel"] = lambda p=proj: mlp_to_tunix(
            reader.get(f"layers.{layer}.mlp.{p}_proj.weight")
        )
    if rest.endswith(".scale") and rest[: -len(".scale")] in _TUNIX_NORMS:
        return reader.get(f"layers.{layer}.{_TUNIX_NORMS[rest[: -len('.scale')]]}.weight")
    if rest not in builders:
        raise KeyError(f"no HF source known for tunix parameter {path!r}")
    out = builders[rest]()
    if out.shape != tuple(shape):
        raise ValueError(f"{path}: HF checkpoint gives shape {out.shape}, the tunix model expects {tuple(shape)}")
    return out
