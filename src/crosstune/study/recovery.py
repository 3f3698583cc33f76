"""A study that survives preemption: its bundle has a copy in a bucket (crosstune.run.bucket), pushed after every
stage and, while training runs, after every checkpoint; a study that starts on a machine whose bundle is missing or
behind the bucket's copy pulls that copy first, and training resumes from its last complete checkpoint.

"Behind" compares (finished stages, last checkpoint step of the study's run) of the two copies: the copy that got
further wins; on a tie the machine's own bundle is kept (it holds at least what it last pushed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from crosstune.run.bucket import BucketCopy, BucketError, bundle_copy, drop_incomplete_checkpoints
from crosstune.run.layout import saved_steps
from crosstune.study.bundle import StudyError, read_manifest
from crosstune.study.bundle_schema import BUNDLE_MANIFEST, parse_manifest

FINISHED = ("done", "skipped")


def progress(manifest: dict[str, Any] | None, steps: list[int]) -> tuple[int, int]:
    """(finished stages, last checkpoint step) of a bundle; (-1, -1) when there is no bundle."""
    if manifest is None:
        return (-1, -1)
    stages = manifest.get("stages") if isinstance(manifest.get("stages"), dict) else {}
    done = sum(1 for e in stages.values() if isinstance(e, dict) and e.get("status") in FINISHED)
    return (done, max(steps, default=0))


def _bucket_manifest(copy: BucketCopy) -> dict[str, Any] | None:
    text = copy.read_text(BUNDLE_MANIFEST)
    if text is None:
        return None
    fix = "fix or remove the bucket's copy, or give another --bucket"
    return parse_manifest(text, f"{copy.remote}/{BUNDLE_MANIFEST}", copy.local, fix)


def restore_from_bucket(copy: BucketCopy, run_rel: str, console: Console) -> None:
    """Pull the bucket's copy of the bundle over the local one when the local one is missing or behind it; then
    drop the run's checkpoints that arrived incomplete (a push a preemption cut short)."""
    bundle = copy.local
    theirs = _bucket_manifest(copy)
    if theirs is None:
        console.print(f"bucket: no copy of this bundle in {copy.remote} yet: it is made as the study goes")
        return
    ours = read_manifest(bundle)
    ahead, behind = progress(theirs, copy.saved_steps(run_rel)), progress(ours, saved_steps(bundle / run_rel))
    if ours is not None and behind >= ahead:
        console.print(f"bucket: this machine's bundle is as far as {copy.remote} (stages, step {behind}): kept")
        return
    what = "missing here" if ours is None else f"behind it here (stages, step: {behind} < {ahead})"
    console.print(f"bucket: pulling {copy.remote} ({ahead[0]} stages finished, step {ahead[1]}): the bundle is {what}")
    copy.pull()
    if dropped := drop_incomplete_checkpoints(bundle / run_rel):
        console.print(f"bucket: checkpoint(s) {dropped} arrived incomplete (a push cut short): dropped")


def push_bundle(copy: BucketCopy | None, console: Console, *, strict: bool = False) -> None:
    """Push the whole bundle (after a stage; strict: at the study's end, where a failure is the command's)."""
    if copy is None:
        return
    try:
        copy.push()
    except BucketError as e:
        if strict:
            raise StudyError(f"{e} (the bundle itself is complete in {copy.local})") from None
        console.print(f"bucket: {copy.remote} not updated ({e}); the next stage's push retries")


def check_bucket(bucket: str | None, bundle: Path) -> BucketCopy | None:
    """The bundle's copy in `bucket` (None without one), checked before any work starts."""
    if bucket is None:
        return None
    try:
        return bundle_copy(bucket, bundle)
    except BucketError as e:
        raise StudyError(str(e)) from None
