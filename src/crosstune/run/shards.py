"""safetensors files read by byte range: the header, one tensor (or a band of its rows) at a time.

Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}},
then the data; offsets count from byte 8 + N. Reading ranges with os.pread keeps memory at one band of rows and
lets an exporter copy untouched tensors byte for byte. numpy has no bfloat16: BF16 is held as uint16 and widened
to float32 by a shift (exact); narrowing rounds to nearest even, as torch does.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from crosstune.errors import CrosstuneError
from crosstune.units import MIB
from crosstune.untrusted_files import UnreadableFile, parse_json

# safetensors dtype -> (numpy storage dtype, is a float we can merge into)
DTYPES: dict[str, tuple[np.dtype, bool]] = {
    "F64": (np.dtype("<f8"), True),
    "F32": (np.dtype("<f4"), True),
    "F16": (np.dtype("<f2"), True),
    "BF16": (np.dtype("<u2"), True),
    "I64": (np.dtype("<i8"), False),
    "I32": (np.dtype("<i4"), False),
    "I16": (np.dtype("<i2"), False),
    "I8": (np.dtype("i1"), False),
    "U8": (np.dtype("u1"), False),
    "BOOL": (np.dtype("?"), False),
    "F8_E4M3": (np.dtype("u1"), False),
    "F8_E5M2": (np.dtype("u1"), False),
}
MAX_HEADER = 100 * MIB


class ShardError(CrosstuneError, ValueError):
    """A safetensors file that is truncated, corrupt or inconsistent; the message names the file."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute file offsets
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


class SafetensorsFile:
    """The header of one .safetensors file, checked against the file's size, and byte-range reads."""

    def __init__(self, path: Path):
        self.path = Path(path)
        size = self.path.stat().st_size
        with open(self.path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ShardError(f"{self.path}: {size} bytes, too short for a safetensors header (truncated?)")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER or 8 + n > size:
                raise ShardError(f"{self.path}: header of {n} bytes runs past the end of the {size}-byte file")
            raw = f.read(n)
        try:
            header = parse_json(raw, self.path)
        except UnreadableFile as e:
            raise ShardError(f"{self.path}: header is not valid JSON ({e.reason}); the file is corrupt") from None
        self.header_bytes = head + raw  # copied verbatim: a merged file keeps every offset
        self.metadata = header.pop("__metadata__", None) or {}
        data = 8 + n
        self.tensors: dict[str, TensorInfo] = {}
        for name, entry in header.items():
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            if dtype not in DTYPES:
                raise ShardError(f"{self.path}: tensor {name!r} has dtype {dtype}, unknown to this reader")
            want = math.prod(shape) * DTYPES[dtype][0].itemsize
            if end - begin != want:
                raise ShardError(f"{self.path}: tensor {name!r} spans {end - begin} bytes, its shape needs {want}")
            if data + end > size:
                raise ShardError(
                    f"{self.path}: tensor {name!r} ends at byte {data + end} but the file has {size} bytes (truncated)"
                )
            self.tensors[name] = TensorInfo(name, dtype, shape, data + begin, data + end)
        self.size = size
        self.data_end = max((t.end for t in self.tensors.values()), default=data)

    def in_order(self) -> list[TensorInfo]:
        return sorted(self.tensors.values(), key=lambda t: t.begin)

    def read_rows(self, name: str, lo: int, hi: int) -> np.ndarray:
        """Rows [lo, hi) of a tensor (first axis) in its storage dtype (BF16 as uint16)."""
        t = self.tensors[name]
        storage = DTYPES[t.dtype][0]
        row = math.prod(t.shape[1:]) * storage.itemsize if t.shape else storage.itemsize
        buf = _pread(self.path, t.begin + lo * row, (hi - lo) * row)
        return np.frombuffer(buf, dtype=storage).reshape((hi - lo, *t.shape[1:]) if t.shape else ())

    def read(self, name: str) -> np.ndarray:
        """A whole tensor; float types as float32 (BF16 widened), others in their own dtype."""
        t = self.tensors[name]
        raw = (
            self.read_rows(name, 0, t.shape[0])
            if t.shape
            else np.frombuffer(_pread(self.path, t.begin, t.nbytes), dtype=DTYPES[t.dtype][0]).reshape(())
        )
        return to_float32(raw, t.dtype) if DTYPES[t.dtype][1] else raw.copy()


def _pread(path: Path, offset: int, n: int) -> bytearray:
    """`n` bytes at `offset`. One pread returns at most ~2 GiB on Linux (a 31B's bf16 embedding is 2.8 GB), and may
    return less at any size: read on until `n` or the file's end."""
    out = bytearray(n)
    view, done = memoryview(out), 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while done < n:
            got = os.preadv(fd, [view[done:]], offset + done)
            if got == 0:
                break
            done += got
    finally:
        os.close(fd)
    if done != n:
        raise ShardError(f"{path}: read {done} of {n} bytes at offset {offset} (file truncated while reading?)")
    return out


try:  # ml_dtypes (installed with jax) casts bf16 <-> f32 in one C pass; the bit-level fallback gives the same bits
    from ml_dtypes import bfloat16 as _BF16
except ImportError:  # pragma: no cover - exercised where jax is absent
    _BF16 = None


def to_float32(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype != "BF16":
        return raw.astype(np.float32)
    if _BF16 is not None:
        return raw.view(_BF16).astype(np.float32)
    out = np.empty(raw.shape, np.uint32)
    np.left_shift(raw, 16, out=out, dtype=np.uint32)
    return out.view(np.float32)


def from_float32(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 -> the storage of `dtype` (BF16: round to nearest even, NaN kept quiet)."""
    if dtype != "BF16":
        return x.astype(DTYPES[dtype][0])
    if _BF16 is not None:
        return x.astype(_BF16).view(np.uint16)
    return _bf16_bits(x)


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bf16 bits with numpy alone."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    out = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def save_numpy_file(tensors: dict[str, np.ndarray], path: Path, metadata: dict[str, str]) -> None:
    """safetensors.numpy.save_file, with the same bytes for the same tensors and metadata: safetensors keeps the
    metadata in a Rust HashMap, so with two or more keys their order in the header changes from call to call (an
    export would hash differently on every run). The header is rewritten in place with the metadata keys sorted:
    the same characters in another order, so its length and every data offset stay."""
    from safetensors.numpy import save_file

    save_file(tensors, str(path), metadata=metadata)
    with open(path, "r+b") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        raw = f.read(n)
        header = parse_json(raw, path)
        if len(header.get("__metadata__") or {}) < 2:
            return
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
        ordered = {"__metadata__": header.pop("__metadata__"), **header}
        text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode()
        if len(text) != len(raw.rstrip(b" ")) or parse_json(text, path) != parse_json(raw, path):
            raise ShardError(f"{path}: safetensors wrote a header this rewrite does not reproduce; nothing was changed")
        f.seek(8)
        f.write(text + b" " * (n - len(text)))
