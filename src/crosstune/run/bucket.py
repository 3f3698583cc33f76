"""A folder's copy in a bucket, kept while the work goes on, so a preempted machine loses nothing a new one can't
take up: gs://BUCKET/... (through `gcloud storage`), s3://BUCKET/... (through `aws s3`), or a local folder (an NFS
mount, a test's stand-in).

push   local → bucket in two passes: first every new or changed file, then (a second pass) the files the local
       folder no longer holds (rotated checkpoints). A preemption in the middle leaves the bucket with the previous
       push's complete checkpoint beside a part of the new one: a complete checkpoint is never deleted before its
       successor is whole.
pull   bucket → local, every file (nothing local is deleted); then `drop_incomplete_checkpoints` removes step folders
       whose recorded checksums don't verify (a push that a preemption cut short).
Transient names never travel: locks, staging folders, crosstune's and Orbax's temp folders (TRANSIENT).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstune.errors import CrosstuneError
from crosstune.fsutil import say
from crosstune.run.integrity import CheckpointCorruptError, verify_checksums
from crosstune.run.layout import CHECKPOINTS, LOCK, TORCH_CHECKPOINT_PREFIX, step_folders

# A path (relative, "/"-separated) with one of these parts is transient: `.lock`, torch's `.staging` and
# `.adapter.tmp`, fsutil's `.NAME.tmp-HOST-PID-X`/`.old-` folders, atomic writes' `.NAME.XXXXXXXX`, this module's
# `.NAME.copying`, Orbax's `N.orbax-checkpoint-tmp-T`.
TRANSIENT = re.compile(
    rf"(^|.*/)({re.escape(LOCK)}|\.staging|\.adapter\.tmp|\.[^/]+\.(tmp|old)-[^/]*|\.[^/]+\.[a-z0-9_]{{8}}"
    r"|\.[^/]+\.copying|[^/]*\.orbax-checkpoint-tmp[^/]*)(/.*)?$"
)
SCHEMES = ("gs://", "s3://")
# what gcloud ("matched no objects or files") and aws ("(404)", "NoSuchKey") say of an object that is not there; a
# missing bucket is an error, not "no copy yet"
MISSING = re.compile(r"matched no objects|\(404\)|NoSuchKey")
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
                _sync_folders(self.local, Path(self.remote), delete=delete)
            else:
                _run(self._sync_argv(str(self.local), self.remote, delete))

    def push_checkpoint(self, step: int) -> None:
        """`push` after the checkpoint of `step` was saved; a failure is a warning, not the run's end: the next
        checkpoint's push sends everything this one did not."""
        try:
            self.push()
        except BucketError as e:
            say(f"[bucket] checkpoint {step} not copied to {self.remote}: {e}")

    def pull(self) -> None:
        """bucket → local, every file; nothing local is deleted."""
        self.local.mkdir(parents=True, exist_ok=True)
        if self.scheme == "file":
            _sync_folders(Path(self.remote), self.local, delete=False)
        else:
            _run(self._sync_argv(self.remote, str(self.local), delete=False))

    # --- reading the bucket's copy without pulling it ------------------------------------------------------------
    def read_text(self, rel: str) -> str | None:
        """The text of `rel` in the bucket's copy; None when it has none."""
        if self.scheme == "file":
            path = Path(self.remote) / rel
            return path.read_text() if path.is_file() else None
        url = f"{self.remote.rstrip('/')}/{rel}"
        argv = ["gcloud", "storage", "cat", url] if self.scheme == "gs" else ["aws", "s3", "cp", url, "-"]
        return _run(argv, missing_ok=True)

    def names(self, rel: str) -> list[str]:
        """The names directly under `rel` in the bucket's copy ([] when it holds none)."""
        if self.scheme == "file":
            path = Path(self.remote) / rel
            return sorted(p.name for p in path.iterdir()) if path.is_dir() else []
        url = f"{self.remote.rstrip('/')}/{rel.rstrip('/')}/"
        argv = ["gcloud", "storage", "ls", url] if self.scheme == "gs" else ["aws", "s3", "ls", url]
        listed = _run(argv, missing_ok=True) or ""
        # gcloud prints full URLs (gs://b/x/NAME/), aws prints "PRE NAME/" or "DATE TIME SIZE NAME"
        return sorted({line.rstrip("/").rsplit("/", 1)[-1].split()[-1] for line in listed.splitlines() if line.strip()})

    def saved_steps(self, run_rel: str) -> list[int]:
        """The checkpoint steps the bucket's copy of the run `run_rel` lists (complete or not: a pull checks)."""
        found = (n.removeprefix(TORCH_CHECKPOINT_PREFIX) for n in self.names(f"{run_rel}/{CHECKPOINTS}"))
        return sorted(int(n) for n in found if n.isdigit())

    def _sync_argv(self, src: str, dst: str, delete: bool) -> list[str]:
        if self.scheme == "gs":
            argv = ["gcloud", "storage", "rsync", src, dst, "--recursive", f"--exclude={TRANSIENT.pattern}"]
            return argv + (["--delete-unmatched-destination-objects"] if delete else [])
        excludes = ["*.lock", "*/.staging/*", "*/.adapter.tmp/*", "*.tmp-*", "*.old-*", "*orbax-checkpoint-tmp*"]
        argv = ["aws", "s3", "sync", src, dst, "--only-show-errors"]
        argv += [a for pattern in excludes for a in ("--exclude", pattern)]
        return argv + (["--delete"] if delete else [])


def check_bucket(bucket: str) -> str:
    """`bucket` (stripped) when a bundle's copy can be kept there: gs://NAME[/...], s3://NAME[/...] or a folder."""
    bucket = bucket.strip()
    if not bucket:
        raise BucketError("--bucket is empty: give gs://NAME, s3://NAME or a folder")
    if bucket.startswith(SCHEMES) and not bucket.split("://", 1)[1].strip("/"):
        raise BucketError(f"--bucket {bucket}: name the bucket, e.g. gs://my-bundles")
    return bucket


def bundle_copy(bucket: str, bundle: Path) -> BucketCopy:
    """The copy of the folder `bundle` in `bucket`: BUCKET/<bundle's folder name>."""
    bucket = check_bucket(bucket)
    remote = bucket if bucket.startswith(SCHEMES) else str(Path(bucket).expanduser().resolve())
    if remote == str(Path(bundle).resolve()) or str(Path(bundle).resolve()).startswith(remote.rstrip("/") + "/"):
        raise BucketError(f"--bucket {bucket} holds the bundle itself: give a folder or bucket beside it")
    return BucketCopy(Path(bundle), f"{remote.rstrip('/')}/{Path(bundle).name}")


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
            shutil.rmtree(folder)
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
    raise BucketError(f"`{' '.join(argv)}` failed (exit {done.returncode}): {err} — check the bucket's name and "
                      "this machine's credentials, then run the same command again")  # fmt: skip


def _files(root: Path) -> dict[str, Path]:
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = [d for d in dirnames if not TRANSIENT.match(_join(rel_dir, d))]
        for name in filenames:
            rel = _join(rel_dir, name)
            if not TRANSIENT.match(rel) and not os.path.islink(os.path.join(dirpath, name)):
                found[rel] = Path(dirpath) / name
    return found


def _join(rel_dir: str, name: str) -> str:
    return name if rel_dir == "." else f"{rel_dir}/{name}"


def _sync_folders(src: Path, dst: Path, *, delete: bool) -> None:
    """rsync's meaning between two folders: a file is copied when its size or mtime differ (each copy renamed into
    place whole, its mtime kept for the next comparison); with `delete`, files under `dst` that `src` lacks are
    removed instead."""
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
        target = dst / rel
        st = path.stat()
        if target.is_file() and (t := target.stat()).st_size == st.st_size and t.st_mtime_ns == st.st_mtime_ns:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.copying")
        shutil.copyfile(path, tmp)  # the bytes and the mtime only: object-store mounts refuse modes and xattrs
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, target)
