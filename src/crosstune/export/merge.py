"""Merged export: the base checkpoint with W + scale · B @ A folded in, streamed shard by shard.

Each output shard has the base shard's name, header and tensor order (so model.safetensors.index.json is copied
as is). Tensors without LoRA are copied byte for byte; a LoRA target is read a band of rows at a time, widened to
float32, given its delta, and cast back to the base dtype. Bands are computed on a few threads and written in
order, so memory stays at a few bands (MERGE_BAND_BYTES each) plus the LoRA matrices, whatever the checkpoint size;
sha256 of every output is computed on another thread as it is written. The base's config.json, tokenizer and
generation config are copied unchanged (merge_and_unload + save_pretrained would rewrite Gemma 4's config.json:
docs/TUNIX_LAYOUT.md, "Merged export").
"""

from __future__ import annotations

import collections
import ctypes
import functools
import hashlib
import os
import queue
import re
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from crosstune.confinement import inside
from crosstune.families import family_of_hf_config
from crosstune.fsutil import file_sha256
from crosstune.hub import files_root
from crosstune.run.base_checkpoint import WEIGHT_SUFFIXES, BaseCheckpoint, open_base
from crosstune.run.lora_weights import ExportError, LoraWeights
from crosstune.run.shards import DTYPES, SafetensorsFile, TensorInfo, from_float32, to_float32
from crosstune.units import MIB

COPY_BYTES = 16 * MIB  # passthrough copy chunk
MERGE_BAND_BYTES = 1 * MIB  # float32 rows of a LoRA target processed at once
MERGE_WORKERS = min(4, os.cpu_count() or 1)

Progress = Callable[[int], None]  # called with bytes written


def plan_merge(base: BaseCheckpoint, lora: LoraWeights) -> dict[str, str]:
    """base tensor name -> LoRA module, for every module; refuses (naming the tensor) a family or shape mismatch, a
    target the base lacks, or a target in a dtype we can't merge into."""
    try:
        family = family_of_hf_config(base.config)
    except KeyError as e:
        raise ExportError(f"{base.dir}/config.json: {e.args[0]}") from None
    if family.name != lora.family:
        raise ExportError(f"{base.dir}: a {family.name} checkpoint, but the LoRA was trained on {lora.family}")
    lora.check(family.spec_from_hf_config(base.config), where=f"LoRA vs {base.dir}/config.json")
    prefix = base.layer_prefix()
    plan: dict[str, str] = {}
    for module, (a, b) in lora.modules.items():
        tensor = prefix + module[len("model.layers.") :] + ".weight"
        if tensor not in base.where:
            raise ExportError(f"{base.dir}: target weight {tensor!r} is missing (LoRA module {module} has no base)")
        info = base.files[base.where[tensor]].tensors[tensor]
        if info.shape != (b.shape[0], a.shape[1]):
            raise ExportError(
                f"{base.dir}/{base.where[tensor]}: {tensor} has shape {info.shape}, the LoRA delta "
                f"{(b.shape[0], a.shape[1])}"
            )
        if not DTYPES[info.dtype][1]:
            raise ExportError(f"{base.dir}/{base.where[tensor]}: {tensor} is {info.dtype}; can't merge a LoRA into it")
        plan[tensor] = module
    return plan


class HashingWriter:
    """Writes bytes to a file and hashes them (sha256) on a second thread, so hashing overlaps the I/O."""

    def __init__(self, path: Path):
        self.path = path
        self._f = open(path, "wb")
        self._h = hashlib.sha256()
        self._q: queue.Queue = queue.Queue(maxsize=4)
        self._t = threading.Thread(target=self._hash, daemon=True)
        self._t.start()
        self.nbytes = 0

    def _hash(self) -> None:
        while (chunk := self._q.get()) is not None:
            self._h.update(chunk)

    def write(self, chunk: bytes) -> None:
        self._f.write(chunk)
        self._q.put(chunk)
        self.nbytes += len(chunk)

    def close(self) -> str:
        self._q.put(None)
        self._t.join()
        self._f.close()
        return self._h.hexdigest()


try:  # one fused pass for W += B @ A (BLAS gemm with beta = 1); numpy's matmul + add otherwise
    from scipy.linalg.blas import sgemm as _sgemm
except ImportError:  # pragma: no cover - scipy comes with jax
    _sgemm = None


def add_lora_band(w: np.ndarray, b: np.ndarray, a: np.ndarray) -> None:
    """w [rows, in] += b [rows, r] @ a [r, in], in place, float32."""
    if _sgemm is not None and w.flags.c_contiguous:
        # Row-major w is column-major w.T: w.T = 1·a.T @ b.T + 1·w.T, written into w's own memory.
        res = _sgemm(1.0, a.T, b.T, beta=1.0, c=w.T, overwrite_c=1)
        if not np.shares_memory(res, w):  # f2py copied instead of writing in place
            w[...] = res.T
    else:
        w += b @ a


def merge_band(src: SafetensorsFile, info: TensorInfo, lo: int, hi: int, a: np.ndarray, b: np.ndarray):
    """Rows [lo, hi) of base tensor `info` plus b[lo:hi] @ a (b already scaled), in the base dtype's bytes."""
    w = np.ascontiguousarray(to_float32(src.read_rows(info.name, lo, hi), info.dtype))
    add_lora_band(w, b[lo:hi], a)
    return memoryview(from_float32(w, info.dtype)).cast("B")


def _read_range(path: Path, begin: int, end: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunk = os.pread(fd, end - begin, begin)
    finally:
        os.close(fd)
    if len(chunk) != end - begin:
        raise ExportError(f"{path}: ended at byte {begin + len(chunk)}, expected {end} (truncated while reading?)")
    return chunk


def _shard_pieces(src: SafetensorsFile, plan: dict[str, str], lora: LoraWeights, done: set[str]):
    """The output shard as a sequence of jobs, each returning the next bytes: untouched byte ranges in COPY_BYTES
    chunks, LoRA targets in bands of MERGE_BAND_BYTES (as float32)."""

    def copies(begin: int, end: int):
        for pos in range(begin, end, COPY_BYTES):
            yield functools.partial(_read_range, src.path, pos, min(end, pos + COPY_BYTES))

    pos = len(src.header_bytes)
    for info in src.in_order():
        if info.name not in plan:
            continue
        yield from copies(pos, info.begin)
        a, b = lora.modules[plan[info.name]]
        a32 = np.ascontiguousarray(a, np.float32)
        b32 = np.ascontiguousarray(np.asarray(b, np.float32) * np.float32(lora.scale))
        rows, cols = info.shape
        band = max(1, MERGE_BAND_BYTES // (4 * cols))
        for lo in range(0, rows, band):
            yield functools.partial(merge_band, src, info, lo, min(rows, lo + band), a32, b32)
        done.add(info.name)
        pos = info.end
    yield from copies(pos, src.size)


def one_blas_thread() -> None:
    """Give the calling thread a single-threaded OpenBLAS (numpy's and scipy's builds both export
    openblas_set_num_threads_local). A rank-r gemm per band is too small to gain from BLAS threads, which doubled
    the CPU time of a merge here; the bands already run on several threads."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux
        return
    for path in sorted(set(re.findall(r"/\S*openblas\S*\.so[\w.]*", maps))):
        try:
            ctypes.CDLL(path).openblas_set_num_threads_local(1)
        except (OSError, AttributeError):  # an OpenBLAS without per-thread settings: leave it
            continue


def _in_order(jobs, workers: int):
    """Run jobs on a thread pool (numpy, BLAS and pread release the GIL), yielding results in order with at most
    2·workers in flight (bounded memory)."""
    with ThreadPoolExecutor(workers, thread_name_prefix="merge", initializer=one_blas_thread) as pool:
        pending: collections.deque = collections.deque()
        try:
            for job in jobs:
                pending.append(pool.submit(job))
                if len(pending) >= 2 * workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


def write_merged_shards(
    base: BaseCheckpoint,
    lora: LoraWeights,
    plan: dict[str, str],
    out_dir: Path,
    progress: Progress | None = None,
    workers: int = MERGE_WORKERS,
) -> dict[str, str]:
    """Write every base shard, merged, into `out_dir`; returns {file name: sha256}. Bands are computed on `workers`
    threads while this thread writes them in order and another hashes them."""
    hashes: dict[str, str] = {}
    done: set[str] = set()
    for fname, src in base.files.items():
        out = HashingWriter(out_dir / fname)
        try:
            out.write(src.header_bytes)
            for chunk in _in_order(_shard_pieces(src, plan, lora, done), workers):
                out.write(chunk)
                if progress:
                    progress(len(chunk))
        finally:
            hashes[fname] = out.close()
        if out.nbytes != src.size:
            raise ExportError(f"{out_dir / fname}: wrote {out.nbytes} bytes, the base shard has {src.size}")
    left = sorted(set(plan) - done)
    if left:
        raise ExportError(f"LoRA for {plan[left[0]]} was never merged: {left[0]} not found while streaming the shards")
    return hashes


def side_files(base_dir: Path, skip: set[str]) -> list[Path]:
    """The base directory's other files (config.json, tokenizer, generation config, index, ...), weight files in
    other formats left out; a link that leads out of the model's folder (its hub repo's, for a snapshot) is refused
    by name: its target would be copied into the export and travel with it."""
    root, found = files_root(base_dir), []
    for p in sorted(Path(base_dir).iterdir()):
        if not p.is_file() or p.name in skip or p.name.startswith(".") or p.suffix in WEIGHT_SUFFIXES:
            continue
        fix = "copy the file itself into the model's folder, or remove the link"
        inside(root, p.absolute(), label="the base model", fix=fix, error=ExportError)
        found.append(p)
    return found


def copy_side_files(base_dir: Path, out_dir: Path, skip: set[str]) -> dict[str, str]:
    """Copy the base directory's side_files unchanged; returns {file name: sha256}."""
    hashes = {}
    for p in side_files(base_dir, skip):
        shutil.copy2(p, out_dir / p.name)  # follows a link: side_files checked it stays in the model's folder
        hashes[p.name] = file_sha256(out_dir / p.name)
    return hashes


def merge_lora_into_shards(
    base_dir: Path, lora: LoraWeights, out_dir: Path, progress: Progress | None = None
) -> dict[str, str]:
    """Write base + LoRA into the (empty, existing) `out_dir`; returns {file name: sha256} of every file written."""
    base = open_base(base_dir)
    plan = plan_merge(base, lora)
    hashes = write_merged_shards(base, lora, plan, Path(out_dir), progress)
    hashes.update(copy_side_files(base.dir, Path(out_dir), skip=set(base.files) | {"export_manifest.json"}))
    return hashes
