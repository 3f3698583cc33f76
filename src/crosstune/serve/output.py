"""Where `bench serve` writes: a folder that is complete or absent, and that replaces only an earlier sweep.

The sweep is written into a temp folder beside `--out` (crosstune.fsutil.staged_dir) and swapped into place when
it ends: finished, aborted or interrupted, so a failing rerun never leaves a new failed cell next to old plots.
bench_manifest.json lists every file the sweep wrote; an existing `--out` is replaced only with `--overwrite`,
only when it is an earlier sweep (its manifest) and only when it holds nothing else. An `--out` that is or contains
one of the sweep's inputs (the tokenizer folder) is refused: replacing it would delete them.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from crosstune import fsutil
from crosstune.errors import read_json
from crosstune.serve.sweep import BenchError

MANIFEST = "bench_manifest.json"
KIND = "crosstune bench serve"
DEFAULT_ROOT = Path("runs/bench")


def default_out(model: str, label: str | None = None, root: Path = DEFAULT_ROOT) -> Path:
    """runs/bench/<label or model>-<date>-<time>: every sweep gets a folder of its own (a second within the same
    second gets a -2 suffix)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", label or model).strip("._") or "sweep"
    stem = root / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, n = stem, 1
    while out.exists():
        n += 1
        out = stem.with_name(f"{stem.name}-{n}")
    return out


def is_sweep(folder: Path) -> bool:
    return (Path(folder) / MANIFEST).is_file()


def check_out(out: Path, *, overwrite: bool, inputs: Sequence[Path] = ()) -> Path:
    """The resolved `out`, or a BenchError before any request is sent: a file, an input's folder, or a folder of
    anything but an earlier sweep (and an earlier sweep without --overwrite) is refused."""
    out = Path(out).absolute()
    for parent in [out, *out.parents]:
        if parent.exists() and not parent.is_dir():
            what = "is" if parent == out else f"is inside {parent}, which is"
            raise BenchError(f"--out {out} {what} a file, not a folder: choose another --out")
    if refusal := fsutil.overlap_refusal(out, inputs, "sweep's input"):
        raise BenchError(refusal)
    if out.is_dir() and any(out.iterdir()):
        if not is_sweep(out):
            raise BenchError(
                f"--out {out} is not empty and holds no {MANIFEST}: it is not an earlier sweep, and bench serve "
                "replaces nothing else; choose another --out (the default makes a new folder per sweep)"
            )
        if not overwrite:
            raise BenchError(f"--out {out} holds an earlier sweep: pass --overwrite to replace it, or choose another")
        manifest = read_json(out / MANIFEST, "delete the folder yourself or choose another --out")
        files = manifest.get("files") if isinstance(manifest, dict) else None
        if not isinstance(files, list):
            raise BenchError(f"{out / MANIFEST}: no list of files: not a bench manifest; choose another --out")
        listed = set(map(str, files))
        extra = sorted(p.name for p in out.iterdir() if p.name not in listed and p.name != MANIFEST)
        if extra:
            raise BenchError(
                f"--out {out} holds an earlier sweep plus files it did not write ({', '.join(extra[:5])}): "
                "move them away first, or choose another --out"
            )
    return out


def write_manifest(folder: Path, summary: dict) -> Path:
    files = sorted(p.name for p in Path(folder).iterdir() if p.name != MANIFEST and p.name != fsutil.MARKER)
    manifest = {
        "kind": KIND,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "endpoint": summary.get("endpoint"),
        "model": summary.get("model"),
        "complete": not summary.get("aborted"),
        "files": files,
    }
    path = Path(folder) / MANIFEST
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return path


class KeepPartial(Exception):  # noqa: N818 - a signal to the context manager, not an error
    """Raised inside `staged_sweep` to swap the (partial) folder into place and then raise `then`."""

    def __init__(self, then: BaseException):
        super().__init__(str(then))
        self.then = then


@contextlib.contextmanager
def staged_sweep(out: Path, *, overwrite: bool, inputs: Sequence[Path] = ()) -> Iterator[Path]:
    """Yield an empty temp folder beside `out`; when the block ends normally, or raises KeepPartial, the folder
    (with its manifest) becomes `out`; on any other error it is removed and `out` is untouched."""
    out = check_out(out, overwrite=overwrite, inputs=inputs)
    pending: BaseException | None = None
    with fsutil.staged_dir(out, may_replace=lambda _: None) as tmp:
        try:
            yield tmp
        except KeepPartial as keep:
            pending = keep.then
        summary_path = tmp / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        write_manifest(tmp, summary)
    if pending is not None:
        raise pending
