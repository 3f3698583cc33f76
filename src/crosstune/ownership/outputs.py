"""Where an output may go (`check_out`) and the two writers of output folders: `owned_output`, a folder swapped into
place whole, and `owned_files`, names written in place beside others' files."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from crosstune.errors import CrosstuneError
from crosstune.fsutil import TEMP_WRITER, overlap_refusal, staged_dir
from crosstune.ownership.manifests import (
    OutputKind,
    OutputRefused,
    _changed,
    _entry,
    _is_part,
    _naming,
    _unproven,
    _write,
    read_manifest,
    refusal,
)


def check_out(
    dest: Path,
    *,
    inputs: Iterable[Path] = (),
    what: str = "input",
    label: str = "--out",
    error=OutputRefused,
    file: bool = False,
) -> Path:
    """`dest` made absolute, or `error` before any work: it is, or is inside, a file; or it is or holds one of
    `inputs` (the command's `what`), which replacing it would delete. `file`: the output is one file (a job spec),
    so `dest` may be a file but not a folder, and what is above it must be folders."""
    dest = Path(dest).absolute()
    if file:
        if dest.is_dir():
            raise error(f"{label} {dest} is a folder: give a file name")
        if dest.exists() and not dest.is_file():
            raise error(f"{label} {dest} is not a regular file (a pipe or device): give a file name")
    for folder in list(dest.parents) if file else [dest, *dest.parents]:
        if folder.exists() and not folder.is_dir():
            where = "is a file" if folder == dest else f"is inside {folder}, which is a file"
            give = "give a path in a folder" if file else "give a folder (it is created if missing)"
            raise error(f"{label} {dest} {where}: {give}")
        if folder.exists():
            break
    if why := overlap_refusal(dest, inputs, what):
        raise error(why.replace("--out", label, 1))
    return dest


@contextlib.contextmanager
def owned_output(
    dest: Path,
    kind: OutputKind,
    *,
    inputs: Iterable[Path] = (),
    what: str = "input",
    overwrite: bool = True,
    flag: str = "--overwrite",
    label: str = "--out",
    error=OutputRefused,
) -> Iterator[Path]:
    """Yield an empty temp folder that becomes `dest` when the block succeeds (staged_dir: on any error, or a kill,
    `dest` is as it was); the block writes its manifest(s) with write_manifest. Refused with `error` before the
    block: see check_out; a non-empty `dest` that holds anything but an earlier output of `kind`, unchanged; and an
    earlier output without `overwrite` (`flag` is how the user gives it)."""
    dest = check_out(dest, inputs=inputs, what=what, label=label, error=error)

    def may_replace(existing: Path) -> None:
        manifest, _ = read_manifest(existing, kind)
        earlier = manifest is not None or any(_is_part(e, kind) for e in existing.iterdir())
        if earlier and not overwrite:  # before hashing it: the cheap refusal first
            raise error(
                f"{label} {existing} holds an earlier output of {kind.made_by}: pass {flag} to replace it, "
                f"or choose another {label}"
            )
        if why := refusal(existing, kind, label):
            raise error(why)

    with staged_dir(dest, may_replace=may_replace) as tmp:
        yield tmp
        if unlisted := [rel for rel, _ in _unproven(tmp, kind, hashes=False, skip=TEMP_WRITER)]:
            raise CrosstuneError(
                f"{kind.made_by} wrote {unlisted[0]} without listing it in {kind.manifest} (a bug: "
                f"please report it); {dest} is as it was"
            )


@contextlib.contextmanager
def owned_files(
    folder: Path, kind: OutputKind, names: Iterable[str], *, label: str = "--out", error=OutputRefused
) -> Iterator[Path]:
    """For a command that writes `names` into `folder` in place, beside files it leaves alone (the evaluator: its
    completion cache grows across reruns). Each of `names` already there must be its own by the manifest (as
    pinned, or claimed by a run of it that died writing), else `error` names it. The names are claimed in the
    manifest before the block and pinned (sha256, size) after it, however it ends but a kill."""
    folder, names = check_out(folder, label=label, error=error), sorted(set(names))
    manifest, why = read_manifest(folder, kind)
    files, claimed = (manifest.files, manifest.writing) if manifest else ({}, [])
    bad = []
    for rel in (n for n in names if (folder / n).exists() or (folder / n).is_symlink()):
        if manifest is None or (rel not in files and rel not in claimed):
            bad.append((rel, why or f"not in its {kind.manifest}"))
        elif rel not in claimed and (problem := _changed(folder / rel, files[rel], kind)):
            bad.append((rel, problem))
    if bad:
        raise error(
            f"{label} {folder} holds files that are not {kind.made_by}'s output: {_naming(bad)}; it writes "
            f"only over what it wrote itself: move them out or choose another {label}"
        )
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    pinning = sorted({*names, *(c for c in claimed if (folder / c).is_file())})  # a dead run's files are ours too
    files = {rel: entry.model_dump() for rel, entry in files.items() if rel not in pinning and (folder / rel).is_file()}
    _write(folder, kind, files, None, writing=pinning)
    try:
        yield folder
    finally:
        for rel in pinning:
            if (folder / rel).is_file() and not (folder / rel).is_symlink():
                files[rel] = _entry(folder / rel)
        if files:
            _write(folder, kind, files, None)
        else:  # nothing written: leave no trace
            (folder / kind.manifest).unlink(missing_ok=True)
            if made and not any(folder.iterdir()):
                folder.rmdir()
