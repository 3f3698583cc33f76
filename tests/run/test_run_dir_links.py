"""A run directory is a root: its checkpoints are found, verified and deleted only inside it (crosstune.run.layout's
step_folders, the one reader of checkpoint folders). `checkpoints` linked to a user's folder made its folders named
like steps (2017/, checkpoint-3/) into checkpoints without checksums, which a pull or a resume deleted; a step
folder that is a link made rmtree fail with a traceback. run.json, recipe.yaml and metrics.jsonl are read only
inside it (crosstune.run.layout.run_file)."""

from __future__ import annotations

import hashlib
import json

import pytest

from crosstune.run.bucket import drop_incomplete_checkpoints
from crosstune.run.integrity import CHECKSUMS, CheckpointCorruptError, verify_checksums
from crosstune.run.layout import RunDirError, read_run_recipe, saved_steps
from crosstune.run.metrics import read_metrics
from crosstune.run.records import read_run_record
from tests.helpers.bundles import checkpoint, tree

CANARY = "-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjEAAAAACmFlczI1Ni1jdHIAAAAGYmNyeXB0"


def _photos(folder):
    for rel in ("2017/beach.jpg", "2018/hills.jpg", "checkpoint-3/notes.txt"):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(rel)
    return tree(folder)


def test_checkpoints_linked_out_of_the_run_directory_are_refused_and_nothing_there_is_deleted(tmp_path):
    run, photos = tmp_path / "run", tmp_path / "photos"
    before = _photos(photos)
    run.mkdir()
    (run / "checkpoints").symlink_to(photos)
    for call in (saved_steps, drop_incomplete_checkpoints):
        with pytest.raises(
            RunDirError,
            match=rf"{run}/checkpoints leads out of the run directory {run} \(to "
            rf"{photos}\): give --run-dir on the disk",
        ):
            call(run)
    assert tree(photos) == before


def test_a_step_folder_that_is_a_link_is_no_checkpoint_and_its_target_is_left_alone(tmp_path):
    run, photos = tmp_path / "run", tmp_path / "photos"
    before = _photos(photos)
    checkpoint(run, 2)
    (run / "checkpoints" / "checkpoint-5").symlink_to(photos / "2017")
    assert saved_steps(run) == [2]
    assert drop_incomplete_checkpoints(run) == [] and tree(photos) == before


def test_checkpoints_linked_inside_the_run_directory_are_read(tmp_path):
    run = tmp_path / "run"
    checkpoint(run / "store", 4)  # run/store/checkpoints/checkpoint-4
    (run / "checkpoints").symlink_to(run / "store" / "checkpoints")
    assert saved_steps(run) == [4] and drop_incomplete_checkpoints(run) == []


@pytest.mark.parametrize(
    ("name", "reader"),
    [("metrics.jsonl", read_metrics), ("run.json", read_run_record), ("recipe.yaml", read_run_recipe)],
)
def test_a_run_file_linked_out_of_the_run_directory_is_never_read_nor_quoted(tmp_path, name, reader):
    """metrics.jsonl linked to a key file: the error for its first line quoted the key's first 60 characters."""
    run, key = tmp_path / "run", tmp_path / "id_ed25519"
    key.write_text(f"{CANARY}\n{CANARY}\n")
    run.mkdir()
    (run / name).symlink_to(key)
    with pytest.raises(RunDirError) as refused:
        reader(run)
    assert str(refused.value) == (
        f"{run}/{name} leads out of the run directory {run} (to {key}): copy the file "
        "itself into the run directory, or remove the link"
    )


def test_a_checksum_record_naming_a_file_outside_its_checkpoint_verifies_nothing(tmp_path):
    """The record is a manifest listing paths: `../../secret` with the secret's own sha256 verified the checkpoint
    by reading a file outside it; a record that is not an object was an AttributeError."""
    run = tmp_path / "run"
    checkpoint(run, 2)
    folder = run / "checkpoints" / "checkpoint-2"
    (tmp_path / "secret").write_text(CANARY)
    record = {"format": 1, "sha256": {"../../../secret": hashlib.sha256(CANARY.encode()).hexdigest()}}
    (folder / CHECKSUMS).write_text(json.dumps(record))
    with pytest.raises(
        CheckpointCorruptError, match=r"lists '../../../secret', which is not a file inside .*checkpoint-2"
    ):
        verify_checksums(folder, "checkpoint")
    (folder / CHECKSUMS).write_text(json.dumps({"format": 1, "sha256": ["adapter_model.safetensors"]}))
    with pytest.raises(CheckpointCorruptError, match=r"unreadable checksum record \(sha256 is not an object\)"):
        verify_checksums(folder, "checkpoint")


def test_a_metrics_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    # `report RUN` blocked forever reading a FIFO as metrics.jsonl (found by the fuzzer)
    import os

    from crosstune.errors import CrosstuneError

    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "metrics.jsonl")
    with pytest.raises(CrosstuneError, match=rf"^{run / 'metrics.jsonl'}: not a regular file"):
        read_metrics(run)
