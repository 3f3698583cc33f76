"""fsutil.files_fingerprint, what a study stage's inputs and the completion cache know files by: small files by
sha256, big ones by size and mtime, hidden ones left out, names relative (a moved folder keeps its fingerprint)."""

from __future__ import annotations

import hashlib
import os
import shutil

from crosstune.fsutil import files_fingerprint


def test_small_files_by_content_big_ones_by_size_and_mtime(tmp_path):
    model = tmp_path / "model"
    (model / ".cache").mkdir(parents=True)
    (model / "config.json").write_text('{"layers": 2}')
    (model / "model.safetensors").write_bytes(b"\0" * 100)
    (model / ".cache" / "download.lock").write_text("changes on every download")
    os.utime(model / "model.safetensors", ns=(1_000, 2_000))
    found = files_fingerprint(model, stat_only_bytes=100)
    assert found == {
        "config.json": "sha256:" + hashlib.sha256(b'{"layers": 2}').hexdigest(),
        "model.safetensors": "size=100 mtime_ns=2000",
    }
    assert files_fingerprint(model / "config.json") == {"config.json": found["config.json"]}

    moved = tmp_path / "elsewhere"
    shutil.copytree(model, moved)  # copy2: mtimes kept
    assert files_fingerprint(moved, stat_only_bytes=100) == found
    (moved / "config.json").write_text('{"layers": 3}')  # same size, other content
    (moved / "model.safetensors").write_bytes(b"\1" * 100)  # rewritten: same size, a new mtime
    changed = files_fingerprint(moved, stat_only_bytes=100)
    assert changed["config.json"] != found["config.json"] and changed["model.safetensors"] != found["model.safetensors"]
