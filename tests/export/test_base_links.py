"""The base model an export copies its side files from (config, tokenizer, chat template, ...) is a root
(crosstune.export.merge.side_files, through crosstune.confinement): a file there linked out of the model's folder
was copied into the merged export, so a key beside a downloaded model travelled with it. A hub-cache snapshot's
files are links into its repo's blobs by design, and stay allowed."""

from __future__ import annotations

import shutil

import pytest

from crosstune.export import export_run
from crosstune.run.lora_weights import ExportError
from tests.helpers.export import torch_run
from tests.helpers.hub_cache import put_in_hub_cache

CANARY = "CANARY-81c2 -----BEGIN OPENSSH PRIVATE KEY-----"


def test_a_side_file_linked_out_of_the_base_model_is_refused_before_anything_is_written(tmp_path, tiny_gemma4_dir):
    base = tmp_path / "base"
    shutil.copytree(tiny_gemma4_dir, base)
    (tmp_path / "id_ed25519").write_text(CANARY)
    (base / "notes.txt").symlink_to(tmp_path / "id_ed25519")
    run = torch_run(tmp_path / "run", base, "gemma4", rank=4, alpha=8.0)
    refusal = rf"{base}/notes.txt leads out of the base model {base} \(to {tmp_path}/id_ed25519\): copy the file"
    with pytest.raises(ExportError, match=refusal):
        export_run(run, "merged", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_hub_cache_snapshot_links_into_its_own_blobs(tmp_path, tiny_gemma4_dir):
    commit = put_in_hub_cache(tmp_path / "cache", "me/tiny-gemma4", tiny_gemma4_dir)
    base = tmp_path / "cache" / "models--me--tiny-gemma4" / "snapshots" / commit
    assert (base / "config.json").is_symlink()
    run = torch_run(tmp_path / "run", base, "gemma4", rank=4, alpha=8.0)
    out = export_run(run, "merged", tmp_path / "out")["merged"]
    assert (out / "config.json").read_bytes() == (tiny_gemma4_dir / "config.json").read_bytes()
    assert not (out / "config.json").is_symlink()
