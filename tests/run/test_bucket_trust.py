"""The bucket is a root the user named and its copy is checked before it is trusted (crosstune.run.bucket,
crosstune.study.recovery): no push or pull goes through a link, a copy that claims more than it holds or fails the
schema in its own tree is never pulled over this machine's bundle, a bucket inside the bundle and a scheme that is
not gs:// or s3:// exactly are refused, and a checkpoint folder's step is ASCII digits. Each case here once
deleted a user's files, broke a good bundle, or crashed."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from crosstune.confinement import ConfinementError
from crosstune.run.bucket import BucketError, bundle_copy
from crosstune.run.layout import checkpoint_step, saved_steps
from crosstune.study.bundle import StudyError, new_manifest, write_manifest
from crosstune.study.bundle_schema import BundleError, OutputRecord, StageEntry
from crosstune.study.recovery import restore_from_bucket
from tests.helpers.bundles import RUN, STUDY, bundle, checkpoint, tree

STAGES = {"prepare": "done", "plan": "done", "train": "running"}


def _mine(folder, files: dict[str, str]) -> dict[str, bytes]:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return tree(folder)


def _restore(tmp_path, local, console=None):
    console = console or Console(record=True, width=300)
    restore_from_bucket(bundle_copy(str(tmp_path / "bucket"), local), RUN, console, **STUDY)
    return console


def test_a_push_never_writes_or_deletes_through_a_link_in_the_bucket(tmp_path):
    """The bucket's entry for the bundle linked to a user's folder: the delete pass once removed every file there
    that the bundle lacks."""
    local, mine = tmp_path / "bundle", tmp_path / "mine"
    bundle(local, {"prepare": "done"}, [2])
    before = _mine(mine, {"thesis.tex": "years of work", "photos/2017.jpg": "jpeg"})
    (tmp_path / "bucket").mkdir()
    (tmp_path / "bucket" / "bundle").symlink_to(mine)
    copy = bundle_copy(str(tmp_path / "bucket"), local)
    with pytest.raises(BucketError, match=rf"{tmp_path}/bucket/bundle is a link \(to {mine}\) in --bucket .*remove"):
        copy.push()
    assert tree(mine) == before

    (tmp_path / "bucket" / "bundle").unlink()  # a link deeper in the copy: nothing is written through it
    (tmp_path / "bucket" / "bundle").mkdir()
    (tmp_path / "bucket" / "bundle" / "runs").symlink_to(mine)
    with pytest.raises(BucketError, match=r"bucket/bundle/runs is a link .* inside the bucket's copy"):
        copy.push()
    assert tree(mine) == before


def test_a_pull_never_writes_through_a_link_in_the_bundle(tmp_path):
    local, mine = tmp_path / "machine" / "bundle", tmp_path / "mine"
    bundle(tmp_path / "bucket" / "bundle", STAGES, [2, 4])
    bundle(local, {"prepare": "done"}, [])
    before = _mine(mine, {"notes.txt": "mine"})
    (local / "runs").symlink_to(mine)
    manifest = (local / "bundle.json").read_bytes()
    with pytest.raises(ConfinementError, match=r"bundle/runs is a link .* inside the bundle .*: remove the link"):
        _restore(tmp_path, local)
    assert tree(mine) == before and (local / "bundle.json").read_bytes() == manifest  # nothing of it moved in


def test_a_bucket_copy_that_claims_more_than_it_holds_is_not_pulled_over_a_good_bundle(tmp_path):
    """Four finished stages claimed, none of whose outputs match the sha256 recorded: the local bundle (two
    finished, training at step 4) is further, and kept whole."""
    remote, local = tmp_path / "bucket" / "bundle", tmp_path / "machine" / "bundle"
    bundle(local, STAGES, [2, 4])
    claimed = new_manifest(STUDY["recipe"], STUDY["backend"])
    bogus = [OutputRecord(path="plan", sha256="0" * 64)]
    claimed.stages = {name: StageEntry(status="done", outputs=bogus) for name in ("prepare", "plan", "train", "export")}
    remote.mkdir(parents=True)
    write_manifest(remote, claimed)
    _mine(remote, {"plan/plan.json": "{}", "marker": "from the bucket"})
    before = tree(local)
    console = _restore(tmp_path, local)
    assert tree(local) == before, console.export_text()
    text = " ".join(console.export_text().split())
    assert "claims (4, 0) (stages, step) but holds (0, 0) (outputs of prepare, plan, train, export" in text
    assert "this machine's bundle ((2, 4)) is kept" in text


def test_a_bucket_copy_that_fails_the_schema_in_its_own_tree_is_refused_naming_it(tmp_path):
    """Its bundle.json lists a run inside another bundle: checked against the local tree it passed, was pulled, and
    the next read blamed the local bundle, now broken."""
    remote, local = tmp_path / "bucket" / "bundle", tmp_path / "machine" / "bundle"
    bundle(local, {"prepare": "done"}, [2])
    bundle(remote, {"prepare": "done", "plan": "done"}, [2])
    manifest = json.loads((remote / "bundle.json").read_text())
    manifest["contents"]["runs"] = ["runs/r"]
    (remote / "bundle.json").write_text(json.dumps(manifest))
    (remote / "runs" / "r").mkdir(parents=True)
    (remote / "runs" / "r" / "bundle.json").write_text("{}")
    before = tree(local)
    refusal = rf"{remote}/bundle.json: contents.runs\[0\] 'runs/r' is inside another bundle .*: fix or remove the"
    with pytest.raises(BundleError, match=refusal + " bucket's copy, or give another --bucket"):
        _restore(tmp_path, local)
    assert tree(local) == before and not (local / "runs" / "r").exists()


def test_a_bucket_copy_of_another_study_is_refused_before_anything_is_pulled(tmp_path):
    remote, local = tmp_path / "bucket" / "bundle", tmp_path / "machine" / "bundle"
    remote.mkdir(parents=True)
    other = new_manifest(STUDY["recipe"], "jax")
    other.stages = {"prepare": StageEntry(status="done")}
    write_manifest(remote, other)
    (remote / "marker").write_text("from the bucket")
    with pytest.raises(
        StudyError,
        match=r"bundle.json is a study of recipe 'tiny-cpu' on jax, not 'tiny-cpu' on "
        r"torch: .*give another --bucket or --out",
    ):
        _restore(tmp_path, local)
    assert not local.exists()


def test_a_bucket_that_is_or_lies_inside_the_bundle_is_refused(tmp_path):
    """Inside it, every push copied the bundle into itself."""
    local = tmp_path / "bundle"
    bundle(local, {}, [])
    with pytest.raises(BucketError, match=rf"--bucket {local}/copies is inside the bundle {local}: every push"):
        bundle_copy(str(local / "copies"), local)
    with pytest.raises(BucketError, match="holds the bundle itself"):
        bundle_copy(str(local), local)
    (tmp_path / "link").symlink_to(local)  # the same folder by another name
    with pytest.raises(BucketError, match="is inside the bundle"):
        bundle_copy(str(tmp_path / "link" / "copies"), local)


def test_a_bucket_or_a_bundle_copy_that_is_not_a_folder_is_refused(tmp_path):
    """A FIFO at BUCKET/<bundle> left a FileExistsError traceback at the first push (found by the fuzzer)."""
    import os

    (tmp_path / "bucket").mkdir()
    os.mkfifo(tmp_path / "bucket" / "bundle")
    (tmp_path / "file").write_text("mine")
    for bucket, path in ((tmp_path / "bucket", tmp_path / "bucket" / "bundle"), (tmp_path / "file", tmp_path / "file")):
        with pytest.raises(BucketError, match=rf"^{path} \(.*--bucket {bucket}\) is not a folder: move it aside"):
            bundle_copy(str(bucket), tmp_path / "bundle")


def test_a_folder_in_the_copy_where_the_bundle_has_a_file_is_refused_by_the_push(tmp_path):
    """It left an IsADirectoryError traceback from the rename into place (found by the fuzzer)."""
    local = tmp_path / "bundle"
    bundle(local, {}, [])
    (tmp_path / "bucket" / "bundle" / "bundle.json").mkdir(parents=True)
    with pytest.raises(BucketError, match=r"bundle/bundle.json \(the bucket's copy\) is not a file, and the copy"):
        bundle_copy(str(tmp_path / "bucket"), local).push()


def test_a_file_with_the_longest_name_a_folder_allows_is_copied_both_ways(tmp_path):
    """Its temp name `.NAME.copying` was too long: an OSError at the pull (found by the fuzzer)."""
    local = tmp_path / "bundle"
    bundle(local, {}, [])
    (local / ("x" * 255)).write_text("kept")
    copy = bundle_copy(str(tmp_path / "bucket"), local)
    copy.push()
    assert (tmp_path / "bucket" / "bundle" / ("x" * 255)).read_text() == "kept"


def test_a_fifo_in_the_copy_is_not_copied(tmp_path):
    """shutil.copyfile refused it with SpecialFileError, a traceback at the pull (found by the fuzzer)."""
    import os

    local = tmp_path / "bundle"
    bundle(local, {}, [])
    os.mkfifo(local / "pipe")
    bundle_copy(str(tmp_path / "bucket"), local).push()
    assert not os.path.lexists(tmp_path / "bucket" / "bundle" / "pipe")
    assert (tmp_path / "bucket" / "bundle" / "bundle.json").is_file()


@pytest.mark.parametrize("bucket", ["GS://name", "Gs://name", "S3://name", "gs:/name", "gcs://name", "file:///x"])
def test_a_scheme_that_is_not_gs_or_s3_exactly_is_refused(tmp_path, monkeypatch, bucket):
    """`GS://name` was taken for a local folder `GS:/name`."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BucketError, match=rf"--bucket {bucket}: not a bucket crosstune copies to .*gs://NAME"):
        bundle_copy(bucket, tmp_path / "bundle")
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_folder_whose_suffix_is_a_digit_but_not_ascii_is_no_step(tmp_path):
    """'²' passes str.isdigit and int() refused it: the pull crashed. '٣' int() reads as 3."""
    remote, local = tmp_path / "bucket" / "bundle", tmp_path / "machine" / "bundle"
    bundle(remote, STAGES, [4])
    for odd in ("checkpoint-²", "checkpoint-٣", "٣"):
        (remote / RUN / "checkpoints" / odd).mkdir()
    assert [checkpoint_step(n) for n in ("checkpoint-4", "12", "checkpoint-²", "٣", "-1", "4a")] == [
        4,
        12,
        None,
        None,
        None,
        None,
    ]
    assert bundle_copy(str(tmp_path / "bucket"), local).saved_steps(RUN) == [4] == saved_steps(remote / RUN)
    _restore(tmp_path, local)
    assert saved_steps(local / RUN) == [4]


def test_a_pull_moves_in_what_it_checked_and_keeps_what_only_this_machine_has(tmp_path):
    remote, local = tmp_path / "bucket" / "bundle", tmp_path / "machine" / "bundle"
    bundle(remote, STAGES, [2, 4])
    checkpoint(remote / RUN, 6, complete=False)
    bundle(local, {"prepare": "done"}, [2])
    (local / "notes.txt").write_text("only here")
    console = _restore(tmp_path, local)
    assert saved_steps(local / RUN) == [2, 4] and (local / "notes.txt").read_text() == "only here"
    assert "checkpoint(s) [6] arrived incomplete" in console.export_text()
    assert [p.name for p in local.parent.iterdir()] == ["bundle"]  # the temp folder it was checked in is gone
