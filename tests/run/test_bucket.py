"""The bucket copy (crosstune.run.bucket): a local folder standing in for the bucket, and the gs:// and s3:// tools
stubbed to record what they are asked; the study's decision to pull (crosstune.study.recovery)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from crosstune.run.bucket import TRANSIENT, BucketCopy, BucketError, bundle_copy, drop_incomplete_checkpoints
from crosstune.run.layout import saved_steps
from crosstune.study.bundle import read_manifest
from crosstune.study.bundle_schema import BundleError
from crosstune.study.recovery import progress, restore_from_bucket
from tests.helpers.bundles import RUN, STUDY, bundle, checkpoint, manifest_of, tree


def test_push_copies_every_file_but_the_transient_ones_and_then_what_was_rotated_away(tmp_path):
    local = tmp_path / "bundle"
    bundle(local, {"prepare": "done"}, [2, 4])
    transient = [
        ".lock",
        f"{RUN}/.lock",
        f"{RUN}/checkpoints/.staging/checkpoint-6/x",
        ".bundle.json.ab12cd34",
        f"{RUN}/checkpoints/6.orbax-checkpoint-tmp-17/x",
        ".export.tmp-host-12-0123abcd/y",
    ]
    for rel in transient:
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_text("half")
    copy = bundle_copy(str(tmp_path / "bucket"), local)
    assert copy.remote == str(tmp_path / "bucket" / "bundle") and copy.scheme == "file"
    copy.push()
    pushed = tree(tmp_path / "bucket" / "bundle")
    assert sorted(pushed) == sorted(set(tree(local)) - set(transient))
    assert all(TRANSIENT.match(rel) for rel in transient) and not any(TRANSIENT.match(rel) for rel in pushed)

    shutil.rmtree(local / RUN / "checkpoints" / "checkpoint-2")  # keep_last rotated it away
    checkpoint(local / RUN, 6)
    copy.push()
    assert copy.saved_steps(RUN) == [4, 6] == saved_steps(tmp_path / "bucket" / "bundle" / RUN)
    assert tree(tmp_path / "bucket" / "bundle") == {k: v for k, v in tree(local).items() if k not in transient}


def test_an_unchanged_file_is_not_copied_again(tmp_path):
    local = tmp_path / "bundle"
    bundle(local, {}, [2])
    copy = bundle_copy(str(tmp_path / "bucket"), local)
    copy.push()
    copied = tmp_path / "bucket" / "bundle" / RUN / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors"
    before = copied.stat().st_ino
    copy.push()
    assert copied.stat().st_ino == before  # a copy is renamed into place: a new inode had it been copied


def test_a_pull_drops_the_checkpoints_a_cut_push_left_incomplete(tmp_path):
    remote = tmp_path / "bucket" / "bundle"
    bundle(remote, {"prepare": "done", "plan": "done", "train": "running"}, [2, 4])
    checkpoint(remote / RUN, 6, complete=False)  # the preemption came in the middle of its push
    (remote / RUN / "checkpoints" / "checkpoint-4" / "adapter_model.safetensors").write_bytes(b"cut")  # changed
    local = tmp_path / "machine" / "bundle"
    copy = bundle_copy(str(tmp_path / "bucket"), local)
    restore_from_bucket(copy, RUN, Console(record=True), **STUDY)
    assert saved_steps(local / RUN) == [2]  # 4 fails its checksums, 6 never recorded them
    assert read_manifest(local).stages["train"].status == "running"
    assert drop_incomplete_checkpoints(local / RUN) == []


@pytest.mark.parametrize(
    ("ours", "theirs", "pulled"),
    [
        (None, ({"prepare": "done"}, [2]), True),  # a new machine
        (({"prepare": "done"}, [2]), ({"prepare": "done"}, [4]), True),  # behind: an older checkpoint here
        (({"prepare": "done"}, [4]), ({"prepare": "done", "plan": "done"}, []), True),  # behind: fewer stages
        (({"prepare": "done"}, [4]), ({"prepare": "done"}, [4]), False),  # as far: this machine's is kept
        (({"prepare": "done", "plan": "done"}, [6]), ({"prepare": "done"}, [4]), False),  # ahead
    ],
)
def test_the_bucket_s_copy_is_pulled_only_when_this_machine_s_is_missing_or_behind(tmp_path, ours, theirs, pulled):
    local, remote = tmp_path / "machine" / "bundle", tmp_path / "bucket" / "bundle"
    bundle(remote, *theirs)
    (remote / "marker").write_text("from the bucket")
    if ours is not None:
        bundle(local, *ours)
    console = Console(record=True, width=200)
    restore_from_bucket(bundle_copy(str(tmp_path / "bucket"), local), RUN, console, **STUDY)
    assert (local / "marker").is_file() == pulled, console.export_text()


def test_no_copy_in_the_bucket_yet_and_a_damaged_one(tmp_path):
    local = tmp_path / "bundle"
    console = Console(record=True, width=200)
    restore_from_bucket(bundle_copy(str(tmp_path / "bucket"), local), RUN, console, **STUDY)
    assert "no copy of this bundle in" in console.export_text() and not local.exists()
    (tmp_path / "bucket" / "bundle").mkdir(parents=True)
    (tmp_path / "bucket" / "bundle" / "bundle.json").write_text("{trunc")
    with pytest.raises(BundleError, match=r"bundle/bundle.json:1: not valid JSON: .*give another --bucket"):
        restore_from_bucket(bundle_copy(str(tmp_path / "bucket"), local), RUN, console, **STUDY)
    assert progress(None, []) == (-1, -1) and progress(manifest_of({"a": "done", "b": "running"}), [3]) == (1, 3)


def test_bucket_names_that_can_t_hold_a_copy_are_refused(tmp_path):
    with pytest.raises(BucketError, match="name the bucket"):
        bundle_copy("gs://", tmp_path / "b")
    with pytest.raises(BucketError, match="holds the bundle itself"):
        bundle_copy(str(tmp_path), tmp_path / "b" / "c")
    assert bundle_copy("gs://my-bundles/studies/", tmp_path / "b").remote == "gs://my-bundles/studies/b"


def _stub(tmp_path, name: str, script: str) -> None:
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'#!/bin/bash\necho "$0 $*" >> {tmp_path}/calls\n{script}\n')
    path.chmod(0o755)


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_gs_and_s3_copies_go_through_the_cloud_s_own_cli(tmp_path, monkeypatch, scheme):
    missing = {"gs": "ERROR: (gcloud.storage.cat) The following URLs matched no objects or files", "s3": "404"}
    _stub(tmp_path, "gcloud", f'[ "$2" = cat ] && {{ echo "{missing["gs"]}" >&2; exit 1; }}; exit 0')
    aws_cp = f'[ "$2" = cp ] && {{ echo "fatal error: An error occurred ({missing["s3"]})" >&2; exit 1; }}; '
    _stub(tmp_path, "aws", aws_cp + 'echo "                           PRE checkpoint-4/"; exit 0')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    local = tmp_path / "bundle"
    bundle(local, {}, [])
    copy = bundle_copy(f"{scheme}://b", local)
    copy.push()
    assert copy.read_text("bundle.json") is None
    calls = (tmp_path / "calls").read_text().splitlines()
    tool = "gcloud" if scheme == "gs" else "aws"
    assert [c.split()[0].rsplit("/", 1)[-1] for c in calls] == [tool] * 3
    if scheme == "gs":
        rsync = f"gcloud storage rsync {local} gs://b/bundle --recursive --exclude={TRANSIENT.pattern}"
        assert calls[0].endswith(rsync)
        assert calls[1].endswith("--delete-unmatched-destination-objects")
        assert calls[2].endswith("gcloud storage cat gs://b/bundle/bundle.json")
    else:
        assert f"aws s3 sync {local} s3://b/bundle --only-show-errors --exclude *.lock" in calls[0]
        assert calls[1].endswith("--delete") and not calls[0].endswith("--delete")
        assert copy.saved_steps(RUN) == [4]
    _stub(tmp_path, tool, 'echo "AccessDenied: no permission" >&2; exit 1')
    with pytest.raises(BucketError, match=r"failed \(exit 1\): AccessDenied: no permission — check the bucket"):
        copy.pull()
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BucketError, match=f"needs `{tool}`, which is not installed here"):
        copy.push()


def test_the_copy_travels_to_a_launched_worker_with_the_run_context():
    copy = BucketCopy(Path("/b/runs/r"), "gs://x/b/runs/r")
    assert BucketCopy.from_dict(json.loads(json.dumps(copy.to_dict()))) == copy and BucketCopy.from_dict(None) is None
