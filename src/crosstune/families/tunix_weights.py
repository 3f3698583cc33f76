"""Tunix parameter <- HF safetensors tensor, one tensor at a time (streams a 31B checkpoint through host RAM).

Prefixes: official multimodal checkpoints store the decoder under `model.language_model.`, text-only
`Gemma*ForCausalLM.save_pretrained` under `model.` (tunix 0.1.7's Gemma 4 loader skips the latter: every key,
with only a warning). Both are found here, by looking for the embedding.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from crosstune.errors import InputError
from crosstune.families import family_of_hf_config
from crosstune.families.spec import ModelSpec
from crosstune.families.tunix_layout import heads_to_tunix, mlp_to_tunix, o_to_tunix
from crosstune.model_configs import read_model_config

CAUSAL_PREFIX = "model."  # the decoder of a text-only Gemma*ForCausalLM checkpoint
PREFIXES = ("model.language_model.", "language_model.model.", CAUSAL_PREFIX, "")


class CheckpointReader:
    """Lazy access to the tensors of an HF checkpoint directory (one or several .safetensors files)."""

    def __init__(self, model_dir: Path):
        from safetensors import safe_open

        self.dir = Path(model_dir)
        self._config: dict | None = None
        self._spec: ModelSpec | None = None
        files = sorted(self.dir.glob("*.safetensors"))
        if not files:
            raise InputError(f"no *.safetensors in {self.dir}: give an HF model folder with its weights")
        self._open = {f: safe_open(str(f), framework="numpy") for f in files}
        self._where = {k: f for f, h in self._open.items() for k in h.keys()}
        self.prefix = next((p for p in PREFIXES if f"{p}embed_tokens.weight" in self._where), None)
        if self.prefix is None:
            raise KeyError(f"{self.dir}: no embed_tokens.weight under any of the prefixes {PREFIXES}")

    def config(self) -> dict:
        if self._config is None:
            self._config = read_model_config(self.dir)
        return self._config

    def spec(self) -> ModelSpec:
        if self._spec is None:
            self._spec = family_of_hf_config(self.config()).spec_from_hf_config(self.config(), name=self.dir.name)
        return self._spec

    def has(self, name: str) -> bool:
        return self.prefix + name in self._where

    def get(self, name: str) -> np.ndarray:
        key = self.prefix + name
        if key not in self._where:
            raise KeyError(f"{self.dir}: tensor {key!r} missing (needed for the tunix model)")
        return self._open[self._where[key]].get_tensor(key)


def tunix_tensor(reader: CheckpointReader, path: str, shape: tuple[int, ...]) -> np.ndarray:
    """The value of tunix parameter `path` (dotted, e.g. `layers.5.attn.k_einsum.w`) with shape `shape`, built
    from the HF tensors its family's table row names (families/<name>/tunix.py). A K/V weight of a KV-shared layer
    (which HF doesn't have and tunix never reads) is zeros."""
    row = family_of_hf_config(reader.config()).tunix.row(path)
    prefix = f"layers.{path.split('.')[1]}." if row.per_layer else ""
    if row.kv_owner_only and reader.spec().kv_shared(int(path.split(".")[1])):
        return np.zeros(shape, np.float32)
    parts = [reader.get(prefix + name) for name in row.hf]
    if row.convert == "heads":  # one (N·H, D) projection per fused part, stacked on the parts axis
        heads = shape[next(i for i, a in enumerate(row.shape) if a in "NK")]
        kernels = [heads_to_tunix(w, heads) for w in parts]
        out = kernels[0] if len(kernels) == 1 else np.stack(kernels)
    elif row.convert == "o_proj":
        out = o_to_tunix(parts[0], shape[0])
    elif row.convert == "transpose":  # [out, in] -> [in, out] (3-D: per expert), then the row's shape
        out = mlp_to_tunix(parts[0]) if parts[0].ndim == 2 else np.swapaxes(parts[0], -1, -2)
        out = out.reshape(shape)
    elif row.convert == "reshape":
        out = parts[0].reshape(shape)
    else:
        out = parts[0]
    if out.shape != tuple(shape):
        raise ValueError(f"{path}: HF checkpoint gives shape {out.shape}, the tunix model expects {tuple(shape)}")
    return out
