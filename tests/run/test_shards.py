"""safetensors written by crosstune: the same tensors and metadata give the same bytes (the export's manifest and a
study's output hashes depend on it)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from safetensors.numpy import load_file, save

from crosstune.run.shards import SafetensorsFile, save_numpy_file

TENSORS = {"b.lora_B.weight": np.arange(12, dtype=np.float32).reshape(3, 4), "a.lora_A.weight": np.ones(5, "<f2")}
METADATA = {"format": "pt", "crosstune.vllm_v_aliases": '["x.v_proj"]', "zeta": "é", "alpha": "2"}


def test_the_library_alone_orders_the_metadata_differently_from_call_to_call():
    # Why save_numpy_file exists: safetensors keeps the metadata in a Rust HashMap (random order per map).
    assert len({hashlib.sha256(save(TENSORS, metadata=METADATA)).digest() for _ in range(30)}) > 1


def test_same_tensors_and_metadata_give_the_same_bytes_and_read_back_unchanged(tmp_path):
    digests = set()
    for i in range(30):
        save_numpy_file(TENSORS, tmp_path / f"{i}.safetensors", METADATA)
        digests.add(hashlib.sha256((tmp_path / f"{i}.safetensors").read_bytes()).digest())
    assert len(digests) == 1
    f = SafetensorsFile(tmp_path / "0.safetensors")
    assert f.metadata == METADATA and list(f.metadata) == sorted(METADATA)
    loaded = load_file(str(tmp_path / "7.safetensors"))
    assert set(loaded) == set(TENSORS)
    for name, x in TENSORS.items():
        np.testing.assert_array_equal(loaded[name], x)
        assert loaded[name].dtype == x.dtype


def test_a_short_read_is_read_on_not_taken_for_a_truncated_file(tmp_path, monkeypatch):
    """Linux returns at most ~2 GiB per read (a 31B's bf16 embedding is 2.8 GB): here every read returns 5 bytes,
    and the tensors still read back whole; a file that really ends early is still refused."""
    import os

    from crosstune.run import shards

    save_numpy_file(TENSORS, tmp_path / "t.safetensors", METADATA)
    preadv = os.preadv
    monkeypatch.setattr(shards.os, "preadv", lambda fd, bufs, offset: preadv(fd, [bufs[0][:5]], offset))
    f = SafetensorsFile(tmp_path / "t.safetensors")
    np.testing.assert_array_equal(f.read("b.lora_B.weight"), TENSORS["b.lora_B.weight"])
    whole = (tmp_path / "t.safetensors").read_bytes()
    (tmp_path / "t.safetensors").write_bytes(whole[:-4])
    last = max(f.tensors, key=lambda name: f.tensors[name].begin)  # the tensor whose bytes end the file
    with pytest.raises(shards.ShardError, match="read 6 of 10 bytes"):
        f.read(last)
