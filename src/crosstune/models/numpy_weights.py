"""`crosstune model build`'s weights without torch: the text layout's safetensors drawn with numpy, for a host with
the jax-only install (requirements-jax.lock), e.g. a TPU VM making real-dimension weights.

Names and shapes are the family's HF <-> Tunix table's (`TunixTable.hf_tensors`), under the causal LM's prefix;
the draws follow models.build_rules as the torch writer's do. Each tensor is drawn BAND elements at a time, every band
from its own stream seeded by (seed, tensor name, band), on a pool of threads (numpy draws without the GIL): the same
arguments give byte-identical files on any machine, and a tensor's values do not depend on the shard count. A shard
is written once its tensors are drawn, each held only as its bytes: host memory peaks at one shard plus the tensor
being drawn (`peak_bytes`).
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from crosstune.emit import json_text
from crosstune.families.base import Family
from crosstune.families.spec import DTYPE_BYTES, ModelSpec
from crosstune.families.tunix_table import HfTensor
from crosstune.families.tunix_weights import CAUSAL_PREFIX
from crosstune.models.build_rules import (
    EMBED_STD,
    LAYER_SCALAR,
    ROUTER_SCALES,
    ROUTER_STD,
    SCALE_JITTER,
    SCALES,
    SMALL_HIDDEN,
    exact_shard_limit,
)
from crosstune.units import MIB

BAND = 16 * MIB // DTYPE_BYTES["float32"]  # elements one thread draws at a time
WORKERS = min(os.cpu_count() or 1, 16)
METADATA = {"format": "pt"}  # what transformers' save_pretrained writes (its loader refuses a file without it)

Draw = Callable[[np.random.Generator, int], np.ndarray]  # (stream, n) -> n float32 values


def weight_files(family: Family, spec: ModelSpec, dtype: str, shards: int) -> dict[str, list[HfTensor]]:
    """File name -> its tensors (checkpoint names), split as save_pretrained splits: huggingface_hub's splitter at
    the smallest size limit that gives exactly `shards` files (ShardCountError where none does)."""
    from huggingface_hub import split_state_dict_into_shards_factory
    from transformers.utils import SAFE_WEIGHTS_NAME

    tensors = {CAUSAL_PREFIX + t.name: replace(t, name=CAUSAL_PREFIX + t.name) for t in family.tunix.hf_tensors(spec)}
    sizes = {name: math.prod(t.shape) * DTYPE_BYTES[dtype] for name, t in tensors.items()}
    pattern = SAFE_WEIGHTS_NAME.replace(".safetensors", "{suffix}.safetensors")

    def split(limit: int) -> dict[str, list[str]]:
        return split_state_dict_into_shards_factory(
            sizes, get_storage_size=lambda n: n, filename_pattern=pattern, max_shard_size=limit
        ).filename_to_tensors

    total = sum(sizes.values())
    limit = total if shards == 1 else exact_shard_limit(lambda lim: len(split(lim)), total, shards)
    return {file: [tensors[n] for n in names] for file, names in split(limit).items()}


def peak_bytes(family: Family, spec: ModelSpec, dtype: str, shards: int) -> int:
    """Host memory the writer holds at its peak: a shard's bytes, its largest tensor drawn beside them (the array and
    its bytes at once), and each thread's float32 band."""
    biggest = 0
    for tensors in weight_files(family, spec, dtype, shards).values():
        nbytes = [math.prod(t.shape) * DTYPE_BYTES[dtype] for t in tensors]
        biggest = max(biggest, sum(nbytes) + max(nbytes))
    return biggest + WORKERS * BAND * DTYPE_BYTES["float32"]


def write_numpy_weights(
    family: Family,
    spec: ModelSpec,
    out_dir: Path,
    *,
    dtype: str,
    shards: int,
    seed: int,
    std: float,
    pad_token_id: int,
    say: Callable[[str], None] = lambda message: None,
) -> None:
    """Write `spec`'s random weights into `out_dir` as save_pretrained lays them out: model.safetensors, or `shards`
    model-0000k-of-0000N.safetensors files with model.safetensors.index.json. `std`: the config's
    initializer_range; `pad_token_id`: the embedding row transformers' init leaves at zero."""
    from safetensors import serialize_file
    from transformers.utils import SAFE_WEIGHTS_INDEX_NAME

    storage = np.dtype(np.float32) if dtype == "float32" else np.dtype(_bfloat16())
    files = weight_files(family, spec, dtype, shards)
    with ThreadPoolExecutor(WORKERS) as pool:
        for k, (file, tensors) in enumerate(files.items(), 1):
            data = {}
            for t in tensors:
                say(f"{file} ({k} of {len(files)}): {t.name}")
                draw, pad = _init_of(t, family, spec, std)
                array = _drawn(pool, t, storage, seed, draw, pad_token_id if pad else None)
                data[t.name] = {"dtype": storage.name, "shape": list(t.shape), "data": _little_endian_bytes(array)}
                del array  # only its bytes stay until the shard is written
            serialize_file(data, str(Path(out_dir) / file), metadata=METADATA)
            del data
    if len(files) > 1:
        weight_map = {t.name: file for file, tensors in files.items() for t in tensors}
        total = sum(math.prod(t.shape) * DTYPE_BYTES[dtype] for tensors in files.values() for t in tensors)
        index = {
            "metadata": {"total_parameters": spec.total_params, "total_size": total},  # parameters: no buffers
            "weight_map": dict(sorted(weight_map.items())),
        }
        (Path(out_dir) / SAFE_WEIGHTS_INDEX_NAME).write_text(json_text(index))


def _init_of(t: HfTensor, family: Family, spec: ModelSpec, std: float) -> tuple[Draw, bool]:
    """How tensor `t` is drawn (build_rules: the torch writer's transformers init + randomise_scales), and whether its
    padding row is then zeroed (transformers' init of an embedding; the small models' input embedding is redrawn
    whole)."""
    if SCALES.search(t.name):
        identity = 1.0 if t.name.endswith(ROUTER_SCALES) else family.norm_identity
        return _uniform(identity - SCALE_JITTER, identity + SCALE_JITTER), False
    if t.name.endswith("layer_scalar"):
        return _uniform(*LAYER_SCALAR), False
    if t.name.endswith("router.proj.weight"):
        return _normal(ROUTER_STD), False
    if t.name == CAUSAL_PREFIX + "embed_tokens.weight" and spec.hidden_size <= SMALL_HIDDEN:
        return _normal(EMBED_STD), False
    return _normal(std), t.axes[0] == "V"


def _normal(std: float) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        x = rng.standard_normal(n, np.float32)
        x *= np.float32(std)  # in place: one band per thread
        return x

    return draw


def _uniform(lo: float, hi: float) -> Draw:
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        x = rng.random(n, np.float32)
        x *= np.float32(hi - lo)
        x += np.float32(lo)
        return x

    return draw


def _drawn(pool, t: HfTensor, storage: np.dtype, seed: int, draw: Draw, pad_row: int | None) -> np.ndarray:
    """Tensor `t` in `storage`, drawn BAND elements at a time on the pool's threads."""
    out = np.empty(t.shape, storage)
    flat = out.reshape(-1)
    bands = range(math.ceil(flat.size / BAND))
    stream = zlib.crc32(t.name.encode())

    def fill(band: int) -> None:
        lo, hi = band * BAND, min((band + 1) * BAND, flat.size)
        flat[lo:hi] = draw(np.random.default_rng([seed, stream, band]), hi - lo)

    if len(bands) > 1:
        list(pool.map(fill, bands))
    else:
        fill(0)
    if pad_row is not None:
        out.reshape(t.shape[0], -1)[pad_row] = 0
    return out


def _little_endian_bytes(array: np.ndarray) -> bytes:
    """The tensor's bytes as safetensors stores them (little-endian; no copy beyond the bytes on such a host)."""
    return array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def _bfloat16():
    from ml_dtypes import bfloat16  # installed with jax (both locks)

    return bfloat16
