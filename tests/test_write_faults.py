"""Faults that are not OSError, classified in the one place faults are (crosstune.errors, the CLI's handler): a full
disk under torch's zip writer (a RuntimeError from inline_container.cc) and safetensors (a SafetensorError) is a
disk-full line naming the path, not "a bug"; a disk-full OSError without a file name names the path its writer was
given; a full folder bucket is named as the bucket; export reads nothing of run/adapter through a link out of the
run. /dev/full answers every write with ENOSPC, as a full disk does."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from crosstune import errors
from crosstune.cli import failure_line
from crosstune.export import export_run
from crosstune.run.bucket import BucketError, _sync_folders
from crosstune.run.layout import RunDirError
from tests.helpers.export import torch_run

FULL = "/dev/full"


def _raised(write) -> Exception:
    try:
        write()
    except Exception as e:  # noqa: BLE001 - what the writer raises is the point
        return e
    pytest.fail("the write to /dev/full succeeded")


def test_a_full_disk_under_torch_s_zip_writer_and_safetensors_is_a_disk_full_line_naming_the_path(monkeypatch):
    import torch
    from safetensors.torch import save_file

    zipped = _raised(lambda: torch.save({"a": torch.zeros(1000)}, FULL))
    assert not isinstance(zipped, OSError) and "inline_container" in str(zipped)
    monkeypatch.setattr(errors, "_free_bytes", lambda path: 0)  # the disk holding the path has no space left
    assert failure_line(zipped).startswith(f"disk full writing {FULL}: free space there")
    monkeypatch.setattr(errors, "_free_bytes", lambda path: 10 << 30)  # space left: the write failed otherwise
    line = failure_line(zipped)
    assert line.startswith(f"{FULL}: writing failed (torch's zip writer: ") and "check the disk" in line
    stored = _raised(lambda: save_file({"a": torch.zeros(1000)}, FULL))
    assert type(stored).__name__ == "SafetensorError"
    assert failure_line(stored).startswith(f"disk full writing {FULL}: free space there")
    assert failure_line(RuntimeError("something else")) is None  # anything else stays a bug


def test_a_disk_full_os_error_without_a_file_name_names_the_path_written(tmp_path):
    def write_json(path):
        with open(path, "w") as f:
            f.write("x")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what a buffered write's flush raises

    e = _raised(lambda: write_json(tmp_path / "summary.json"))
    assert failure_line(e).startswith(f"disk full writing {tmp_path}/summary.json: ")


def test_a_full_folder_bucket_is_named_as_the_bucket(tmp_path, monkeypatch):
    local, bucket = tmp_path / "bundle", tmp_path / "bucket"
    local.mkdir()
    (local / "bundle.json").write_text("{}")

    def full(src, dst, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))

    monkeypatch.setattr(shutil, "copyfile", full)
    with pytest.raises(BucketError, match=rf"the bucket's copy at {bucket} is on a full disk \(writing bundle.json\)"):
        _sync_folders(local, bucket, delete=False, label="the bucket's copy")
    assert not list(bucket.rglob(".*.copying"))


@pytest.mark.parametrize("name", ["adapter_config.json", "adapter_model.safetensors"])
def test_export_reads_nothing_of_the_adapter_through_a_link_out_of_the_run(tmp_path, tiny_gemma4_dir, name):
    run = torch_run(tmp_path / "run", tiny_gemma4_dir, "gemma4", rank=4, alpha=8.0)
    outside = tmp_path / f"elsewhere-{name}"
    shutil.move(run / "adapter" / name, outside)
    (run / "adapter" / name).symlink_to(outside)
    with pytest.raises(RunDirError, match=rf"{run}/adapter/{name} leads out of the run directory"):
        export_run(run, "adapter", tmp_path / "out")
    assert not (tmp_path / "out").exists()
