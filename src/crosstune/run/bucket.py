"""A folder's copy in a bucket, kept while the work goes on, so a preempted machine loses nothing a new one can't
take up: gs://BUCKET/... (through `gcloud storage`), s3://BUCKET/... (through `aws s3`), or a local folder (an NFS
mount, a test's stand-in).

push   local → bucket in two passes: first every new or changed file, then (a second pass) the files the local
       folder no longer holds (rotated checkpoints). A preemption in the middle leaves the bucket with the previous
       push's complete checkpoint beside a part of the new one: a complete checkpoint is never deleted before its
       successor is whole.
pull   bucket → a temp folder beside local; `check(staged)` (the study's: schema, paths, checksums) sees the copy
       before anything of it is written into local; then every file is moved into local (nothing local is deleted).
       `drop_incomplete_checkpoints` removes step folders whose recorded checksums don't verify (a push that a
       preemption cut short).
Transient names never travel: locks, staging folders, crosstune's and Orbax's temp folders (TRANSIENT).

The bucket is a root the user named (crosstune.confinement): a folder bucket's copy is written, read and pruned only
through real folders, never through a link (its target would be overwritten and pruned); a scheme is gs:// or s3://
exactly, and a bucket that is, holds or lies inside the bundle is refused.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstune.confinement import no_link_below, remove, walk_files
from crosstune.errors import CrosstuneError
from crosstune.fsutil import say, temp_beside
from crosstune.run.integrity import CheckpointCorruptError, verify_checksums
from crosstune.run.layout import CHECKPOINTS, LOCK, checkpoint_step, step_folders

# A path (relative, "/"-separated) with one of these parts is transient: `.lock`, torch's `.staging` and
# `.adapter.tmp`, fsutil's `.NAME.tmp-HOST-PID-X`/`.old-` folders, atomic writes' `.NAME.XXXXXXXX`, this module's
# `.KEY.copying` (a copy on its way), Orbax's `N.orbax-checkpoint-tmp-T`.
TRANSIENT = re.compile(
    rf"(^|.*/)({re.escape(LOCK)}|\.staging|\.adapter\.tmp|\.[^/]+\.(tmp|old)-[^/]*|\.[^/]+\.[a-z0-9_]{{8}}"
    r"|\.[^/]+\.copying|[^/]*\.orbax-checkpoint-tmp[^/]*)(/.*)?$"
)
SCHEMES = ("gs://", "s3://")  # matched exactly: `GS://b` or `gs:/b` is refused, never taken for a local folder
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")
# what gcloud ("matched no objects or files") and aws ("(404)", "NoSuchKey") say of an object that is not there; a
# missing bucket is an error, not "no copy yet"
MISSING = re.compile(r"matched no objects|\(404\)|NoSuchKey")
_NO_LINK = "remove the link (crosstune copies a bundle only through real folders) or give another --bucket"
_NO_LINK_HERE = "remove the link from the bundle (a pull writes only into real folders), then run the study again"
TIMEOUT_S = 3600  # one push or pull of a bundle (a merged 31B model is ~60 GB)


class BucketError(CrosstuneError):
    """The bucket's tool failed or is missing; the message names the command and what to do."""


@dataclass(frozen=True)
class BucketCopy:
    """`local` (a folder on this machine) and its copy `remote` (gs://..., s3://... or a folder)."""

    local: Path
    remote: str

    @property
    def scheme(self) -> str:
        return next((s[:2] for s in SCHEMES if self.remote.startswith(s)), "file")

    def sub(self, rel: str) -> BucketCopy:
        """The copy of `local/rel` (a run directory inside a bundle)."""
        return BucketCopy(self.local / rel, f"{self.remote.rstrip('/')}/{rel}")

    def to_dict(self) -> dict[str, str]:
        return {"local": str(self.local), "remote": self.remote}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> BucketCopy | None:
        return None if d is None else cls(Path(d["local"]), d["remote"])

    # --- the two directions --------------------------------------------------------------------------------------
    def push(self) -> None:
        """local → bucket: new and changed files first, then what local no longer holds (module docstring)."""
        if not self.local.is_dir():
            return
        for delete in (False, True):
            if self.scheme == "file":
                _sync_folders(self.local, self._folder(), delete=delete, label="the bucket's copy")
            else:
                _run(self._sync_argv(str(self.local), self.remote, delete))

    def push_checkpoint(self, step: int) -> None:
        """`push` after the checkpoint of `step` was saved; a failure is a warning, not the run's end: the next
        checkpoint's push sends everything this one did not."""
        try:
            self.push()
        except BucketError as e:
            say(f"[bucket] checkpoint {step} not copied to {self.remote}: {e}")

    def pull(self, check: Callable[[Path], bool] = lambda staged: True) -> bool:
        """bucket → a temp folder beside local; `check(staged)` raises to refuse the copy or returns False to leave
        local as it is (it may drop what it won't keep); else every file staged is moved into local (nothing local
        is deleted). Whether the copy was taken."""
        with temp_beside(self.local) as tmp:
            staged = tmp / self.local.name
            staged.mkdir()
            if self.scheme == "file":
                _sync_folders(self._folder(), staged, delete=False, label="the pulled copy")
            else:
                _run(self._sync_argv(self.remote, str(staged), delete=False))
            if not check(staged):
                return False
            moves = [
                (path, no_link_below(self.local, rel, label="the bundle", fix=_NO_LINK_HERE))
                for rel, path in walk_files(staged)
            ]  # every target checked before the first is written
            for path, target in moves:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
        return True

    def _folder(self) -> Path:
        """The copy's folder in a folder bucket, refused when any folder on its way is a link: `remote` was made
        from the bucket's resolved path, so every link on it lies below the root the user named."""
        folder = Path(self.remote)
        for where in [*reversed(folder.parents), folder]:
            if where.is_symlink():
                raise BucketError(
                    f"{where} is a link (to {os.readlink(where)}) in --bucket {self.remote}: a push "
                    f"would write through it and prune its target; {_NO_LINK}"
                )
        return folder

    # --- reading the bucket's copy without pulling it ------------------------------------------------------------
    def read_text(self, rel: str) -> str | None:
        """The text of `rel` in the bucket's copy; None when it has none."""
        if self.scheme == "file":
            path = no_link_below(self._folder(), rel, label="--bucket", fix=_NO_LINK, error=BucketError)
            return path.read_text() if path.is_file() else None
        url = f"{self.remote.rstrip('/')}/{rel}"
        argv = ["gcloud", "storage", "cat", url] if self.scheme == "gs" else ["aws", "s3", "cp", url, "-"]
        return _run(argv, missing_ok=True)

    def names(self, rel: str) -> list[str]:
        """The names directly under `rel` in the bucket's copy ([] when it holds none)."""
        if self.scheme == "file":
            path = no_link_below(self._folder(), rel, label="--bucket", fix=_NO_LINK, error=BucketError)
            return sorted(p.name for p in path.iterdir()) if path.is_dir() else []
        url = f"{self.remote.rstrip('/')}/{rel.rstrip('/')}/"
        argv = ["gcloud", "storage", "ls", url] if self.scheme == "gs" else ["aws", "s3", "ls", url]
        listed = _run(argv, missing_ok=True) or ""
        # gcloud prints full URLs (gs://b/x/NAME/), aws prints "PRE NAME/" or "DATE TIME SIZE NAME"
        return sorted({line.rstrip("/").rsplit("/", 1)[-1].split()[-1] for line in listed.splitlines() if line.strip()})

    def saved_steps(self, run_rel: str) -> list[int]:
        """The checkpoint steps the bucket's copy of the run `run_rel` lists (complete or not: a pull checks)."""
        found = (checkpoint_step(n) for n in self.names(f"{run_rel}/{CHECKPOINTS}"))
        return sorted(step for step in found if step is not None)

    def _sync_argv(self, src: str, dst: str, delete: bool) -> list[str]:
        if self.scheme == "gs":
            argv = ["gcloud", "storage", "rsync", src, dst, "--recursive", f"--exclude={TRANSIENT.pattern}"]
            return argv + (["--delete-unmatched-destination-objects"] if delete else [])
        excludes = ["*.lock", "*/.staging/*", "*/.adapter.tmp/*", "*.tmp-*", "*.old-*", "*orbax-checkpoint-tmp*"]
        argv = ["aws", "s3", "sync", src, dst, "--only-show-errors"]
        argv += [a for pattern in excludes for a in ("--exclude", pattern)]
        return argv + (["--delete"] if delete else [])


def bucket_location(bucket: str) -> str:
    """The location `bucket` names (stripped), when a bundle's copy can be kept there: gs://NAME[/...], s3://NAME[/...]
    or a folder.
    Refused: an empty name and a scheme that is not gs:// or s3:// exactly."""
    bucket = bucket.strip()
    if not bucket:
        raise BucketError("--bucket is empty: give gs://NAME, s3://NAME or a folder")
    if _URL.match(bucket) and not bucket.startswith(SCHEMES):
        raise BucketError(
            f"--bucket {bucket}: not a bucket crosstune copies to (the scheme is gs:// or s3://, lower "
            "case with two slashes): give gs://NAME, s3://NAME or a folder"
        )
    if bucket.startswith(SCHEMES) and not bucket.split("://", 1)[1].strip("/"):
        raise BucketError(f"--bucket {bucket}: name the bucket, e.g. gs://my-bundles")
    return bucket


def bundle_copy(bucket: str, bundle: Path) -> BucketCopy:
    """The copy of the folder `bundle` in `bucket`: BUCKET/<bundle's folder name>. Refused besides bucket_location's: a
    folder bucket that is, holds or lies inside the bundle (a push would copy the bundle into itself, or prune it)."""
    bucket = bucket_location(bucket)
    if bucket.startswith(SCHEMES):
        return BucketCopy(Path(bundle), f"{bucket.rstrip('/')}/{Path(bundle).name}")
    root, here = Path(bucket).expanduser().resolve(), Path(bundle).resolve()
    if root == here or root in here.parents:
        raise BucketError(f"--bucket {bucket} holds the bundle itself ({here}): give a folder or bucket beside it")
    if here in root.parents:
        raise BucketError(
            f"--bucket {bucket} is inside the bundle {here}: every push would copy the bundle into "
            "itself; give a folder or bucket outside it"
        )
    copy = root / Path(bundle).name
    for path, what in ((root, f"--bucket {bucket}"), (copy, f"the bundle's copy in --bucket {bucket}")):
        if os.path.lexists(path) and not path.is_symlink() and not path.is_dir():  # a link: refused by the push
            raise BucketError(f"{path} ({what}) is not a folder: move it aside or give another --bucket")
    return BucketCopy(Path(bundle), str(copy))


def drop_incomplete_checkpoints(run_dir: Path) -> list[int]:
    """Remove the step folders of `run_dir` whose checksums were never recorded or don't verify (a copy a
    preemption cut short); the steps removed. Training then resumes from the last complete one."""
    dropped = []
    for step, folder in step_folders(run_dir).items():
        try:
            complete = verify_checksums(folder, "checkpoint")
        except CheckpointCorruptError:
            complete = False
        if not complete:
            remove(folder)
            dropped.append(step)
    return dropped


# --- the transports ---------------------------------------------------------------------------------------------
INSTALL = {
    "gcloud": "install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install) and authenticate "
    "(`gcloud auth login`, or the VM's service account)",
    "aws": "install the AWS CLI (`pip install awscli`) and configure its credentials (`aws configure`)",
}


def _run(argv: list[str], missing_ok: bool = False) -> str | None:
    """Run the bucket tool; its stdout. missing_ok: None when the tool says the object is not there."""
    if shutil.which(argv[0]) is None:
        raise BucketError(f"the bucket copy needs `{argv[0]}`, which is not installed here: {INSTALL[argv[0]]}")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise BucketError(f"`{' '.join(argv[:4])} ...` took over {TIMEOUT_S} s: check the network") from None
    if done.returncode == 0:
        return done.stdout
    err = " ".join(done.stderr.split())[-600:]
    if missing_ok and (MISSING.search(err) or (argv[:3] == ["aws", "s3", "ls"] and not err)):
        return None  # `aws s3 ls` of a prefix that holds nothing exits 1 and says nothing
    raise BucketError(
        f"`{' '.join(argv)}` failed (exit {done.returncode}): {err} — check the bucket's name and "
        "this machine's credentials, then run the same command again"
    )


def _files(root: Path) -> dict[str, Path]:
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = [d for d in dirnames if not TRANSIENT.match(_join(rel_dir, d))]
        for name in filenames:
            rel = _join(rel_dir, name)
            path = os.path.join(dirpath, name)  # a link, a FIFO or a device is no file of a bundle: not copied
            if not TRANSIENT.match(rel) and not os.path.islink(path) and os.path.isfile(path):
                found[rel] = Path(dirpath) / name
    return found


def _join(rel_dir: str, name: str) -> str:
    return name if rel_dir == "." else f"{rel_dir}/{name}"


def _sync_folders(src: Path, dst: Path, *, delete: bool, label: str) -> None:
    """rsync's meaning between two folders: a file is copied when its size or mtime differ (each copy renamed into
    place whole, its mtime kept for the next comparison); with `delete`, files under `dst` that `src` lacks are
    removed instead. Links and special files (FIFOs, devices) under `src` are not copied; a link under `dst` on a
    file's way is refused (`label`)."""
    theirs = _files(src)
    if delete:
        for rel, path in _files(dst).items() if dst.is_dir() else ():
            if rel not in theirs:
                path.unlink()
        for dirpath, _, _ in sorted(os.walk(dst), reverse=True) if dst.is_dir() else ():
            if dirpath != str(dst) and not os.listdir(dirpath):
                os.rmdir(dirpath)
        return
    for rel, path in theirs.items():
        target = no_link_below(dst, rel, label=label, fix=_NO_LINK, error=BucketError)
        if os.path.lexists(target) and not target.is_file():
            raise BucketError(
                f"{target} ({label}) is not a file, and the copy needs the file {rel} there: move it aside and rerun"
            )
        st = path.stat()
        if target.is_file() and (t := target.stat()).st_size == st.st_size and t.st_mtime_ns == st.st_mtime_ns:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        # a short name of its own: `.NAME.copying` of a 250-byte NAME is longer than a file name may be
        key = hashlib.sha256(os.fsencode(target.name)).hexdigest()[:16]
        tmp = target.with_name(f".{key}.copying")
        try:
            shutil.copyfile(path, tmp)  # the bytes and the mtime only: object-store mounts refuse modes and xattrs
        except OSError as e:
            tmp.unlink(missing_ok=True)
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            what_to_do = "free space there, or give another --bucket; this machine's bundle is whole"
            raise BucketError(f"{label} at {dst} is on a full disk (writing {rel}): {what_to_do}") from None
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, target)
