"""The base checkpoint: an HF model directory's safetensors files (single or sharded), opened and checked (index vs
headers vs file sizes) without reading any tensor."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crosstune.model_configs import read_model_config
from crosstune.run.lora_weights import LAYER_PREFIXES, ExportError
from crosstune.run.shards import SafetensorsFile, ShardError
from crosstune.untrusted_files import read_json

INDEX = "model.safetensors.index.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack")


@dataclass(frozen=True)
class BaseCheckpoint:
    """An HF model directory's safetensors files, opened and checked (index vs headers vs file sizes)."""

    dir: Path
    config: dict
    files: dict[str, SafetensorsFile]  # file name -> header
    where: dict[str, str]  # tensor name -> file name
    index: dict | None

    @property
    def nbytes(self) -> int:
        return sum(f.size for f in self.files.values())

    def layer_prefix(self) -> str:
        """Where the decoder layers live (`model.layers.`, or `model.language_model.layers.` when multimodal)."""
        for prefix in LAYER_PREFIXES:
            if any(name.startswith(prefix) for name in self.where):
                return prefix
        raise ExportError(f"{self.dir}: no decoder layers under {', '.join(LAYER_PREFIXES)} in its safetensors")


def open_base(base_dir: Path) -> BaseCheckpoint:
    base_dir = Path(base_dir)
    cfg_path = base_dir / "config.json"
    if not cfg_path.is_file():
        raise ExportError(f"{base_dir}: no config.json (expected an HF model directory)")
    config = read_model_config(base_dir)
    index = None
    if (base_dir / INDEX).is_file():
        index = read_json(base_dir / INDEX)
        names = sorted(set(index.get("weight_map", {}).values()))
        if not names:
            raise ExportError(f"{base_dir / INDEX}: empty weight_map")
    else:
        names = sorted(p.name for p in base_dir.glob("*.safetensors"))
        if len(names) > 1:
            raise ExportError(f"{base_dir}: {len(names)} .safetensors files but no {INDEX} saying which holds what")
        if not names:
            others = sorted(p.name for p in base_dir.iterdir() if p.suffix in WEIGHT_SUFFIXES)
            raise ExportError(f"{base_dir}: no .safetensors weights (found {others or 'none'}); convert to safetensors")
    files: dict[str, SafetensorsFile] = {}
    for name in names:
        if not (base_dir / name).is_file():
            raise ExportError(f"{base_dir / INDEX}: names shard {name}, which is missing")
        try:
            files[name] = SafetensorsFile(base_dir / name)
        except ShardError as e:
            raise ExportError(str(e)) from None
    where: dict[str, str] = {}
    for fname, f in files.items():
        for t in f.tensors:
            if t in where:
                raise ExportError(f"{base_dir}: tensor {t!r} is in both {where[t]} and {fname}")
            where[t] = fname
    if index is not None:
        for t, fname in index["weight_map"].items():
            if where.get(t) != fname:
                raise ExportError(f"{base_dir / INDEX}: maps {t!r} to {fname}, but that file's header lacks it")
        extra = sorted(set(where) - set(index["weight_map"]))
        if extra:
            raise ExportError(f"{base_dir}: tensor {extra[0]!r} ({where[extra[0]]}) is missing from {INDEX}")
    return BaseCheckpoint(base_dir, config, files, where, index)
