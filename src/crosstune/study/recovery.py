"""A study that survives preemption: its bundle has a copy in a bucket (crosstune.run.bucket), pushed after every
stage and, while training runs, after every checkpoint; a study that starts on a machine whose bundle is missing or
behind the bucket's copy pulls that copy first, and training resumes from its last complete checkpoint.

"Behind" compares (finished stages, last checkpoint step of the study's run) of the two copies: the copy that got
further wins; on a tie the machine's own bundle is kept (it holds at least what it last pushed).

The bucket's copy is trusted only once checked, before anything of it is written into the bundle: its bundle.json
against the schema (study/bundle_schema.py, with its paths checked in the copy's own tree), the study it records
(recipe and backend), and its progress counted again after the pull into a temp folder, a finished stage only when
its outputs match the sha256 bundle.json recorded and a checkpoint only when its checksums verify. A copy that
claims more than it holds is left where it is."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from crosstune.ownership import claim
from crosstune.run.bucket import BucketCopy, BucketError, bundle_copy, drop_incomplete_checkpoints
from crosstune.run.layout import saved_steps
from crosstune.study.bundle import BUNDLE_FOLDER, StudyError
from crosstune.study.bundle_schema import BUNDLE_MANIFEST, BundleManifest, parse_manifest

FIX = "fix or remove the bucket's copy, or give another --bucket"


def progress(manifest: BundleManifest | None, steps: list[int]) -> tuple[int, int]:
    """(finished stages, last checkpoint step) of a bundle; (-1, -1) when there is no bundle."""
    if manifest is None:
        return (-1, -1)
    return (sum(1 for e in manifest.stages.values() if e.finished), max(steps, default=0))


def _bucket_manifest(copy: BucketCopy, local: Path) -> BundleManifest | None:
    text = copy.read_text(BUNDLE_MANIFEST)
    return None if text is None else parse_manifest(text, f"{copy.remote}/{BUNDLE_MANIFEST}", local, FIX)


def _unproven(staged: Path, manifest: BundleManifest) -> list[str]:
    """The finished stages of the staged copy whose outputs don't match the sha256 its bundle.json recorded."""
    finished = {name: entry for name, entry in manifest.stages.items() if entry.finished}
    return [name for name, entry in finished.items() if entry.changed_output(staged) is not None]


def restore_from_bucket(copy: BucketCopy, run_rel: str, console: Console, *, recipe: str, backend: str) -> None:
    """Pull the bucket's copy of the bundle over the local one when the local one is missing or behind it; then
    drop the run's checkpoints that arrived incomplete (a push a preemption cut short). The local one must be new,
    empty or a study's bundle; the copy must be of this study (`recipe` on `backend`) and pass every check above."""
    bundle = copy.local
    theirs = _bucket_manifest(copy, bundle)
    if theirs is None:
        console.print(f"bucket: no copy of this bundle in {copy.remote} yet: it is made as the study goes")
        return
    ours = claim(bundle, BUNDLE_FOLDER, error=StudyError)
    if (theirs.recipe.name, theirs.backend) != (recipe, backend):
        raise StudyError(
            f"{copy.remote}/{BUNDLE_MANIFEST} is a study of recipe {theirs.recipe.name!r} on "
            f"{theirs.backend}, not {recipe!r} on {backend}: another study's copy has this bundle's "
            "name there; give another --bucket or --out"
        )
    ahead, here = progress(theirs, copy.saved_steps(run_rel)), progress(ours, saved_steps(bundle / run_rel))
    if ours is not None and here >= ahead:
        console.print(f"bucket: this machine's bundle is as far as {copy.remote} (stages, step {here}): kept")
        return

    def check(staged: Path) -> bool:
        text = (staged / BUNDLE_MANIFEST).read_bytes() if (staged / BUNDLE_MANIFEST).is_file() else b"null"
        manifest = parse_manifest(text, f"{copy.remote}/{BUNDLE_MANIFEST}", staged, FIX)
        if dropped := drop_incomplete_checkpoints(staged / run_rel):
            console.print(f"bucket: checkpoint(s) {dropped} arrived incomplete (a push cut short): dropped")
        unproven = _unproven(staged, manifest)
        held = (ahead[0] - len(unproven), max(saved_steps(staged / run_rel), default=0))
        if ours is not None and here >= held:
            console.print(
                f"bucket: {copy.remote} claims {ahead} (stages, step) but holds {held} (outputs of "
                f"{', '.join(unproven) or 'none'} don't match bundle.json's sha256, checkpoints that "
                f"don't verify dropped): this machine's bundle ({here}) is kept"
            )
            return False
        what = "missing here" if ours is None else f"behind it here (stages, step: {here} < {held})"
        console.print(
            f"bucket: pulling {copy.remote} ({held[0]} stages finished, step {held[1]}, checked): the bundle is {what}"
        )
        return True

    if copy.pull(check) and (dropped := drop_incomplete_checkpoints(bundle / run_rel)):
        console.print(f"bucket: checkpoint(s) {dropped} here are incomplete (no checksums that verify): dropped")


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


def study_copy(bucket: str | None, bundle: Path) -> BucketCopy | None:
    """The bundle's copy in `bucket` (None without one), checked before any work starts."""
    if bucket is None:
        return None
    try:
        return bundle_copy(bucket, bundle)
    except BucketError as e:
        raise StudyError(str(e)) from None
