"""Where `bench serve` writes: a folder that is complete or absent, and that replaces only an earlier sweep.

The sweep is written into a temp folder beside `--out` (crosstune.ownership.owned_output) and swapped into place
when it ends: finished, aborted or interrupted, so a failing rerun never leaves a new failed cell next to old plots.
bench_manifest.json is the one manifest shape (every file the sweep wrote, sha256 and size) with the endpoint, the
model and whether the sweep is complete; an existing `--out` is replaced only with `--overwrite`, only when it is an
earlier sweep, unchanged and holding nothing else. An `--out` that is or contains one of the sweep's inputs (the
tokenizer folder) is refused: replacing it would delete them.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from crosstune import ownership
from crosstune.servebench.summary import load_summary
from crosstune.servebench.sweep import BenchError

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


SWEEP = ownership.OutputKind(KIND, MANIFEST)


def manifest_fields(summary: dict) -> dict:
    """What a sweep's manifest records beside its files: where it measured, and whether every cell ran."""
    return {"endpoint": summary.get("endpoint"), "model": summary.get("model"), "complete": not summary.get("aborted")}


class KeepPartial(Exception):  # noqa: N818 - a signal to the context manager, not an error
    """Raised inside `staged_sweep` to swap the (partial) folder into place and then raise `then`."""

    def __init__(self, then: BaseException):
        super().__init__(str(then))
        self.then = then


@contextlib.contextmanager
def staged_sweep(out: Path, *, overwrite: bool, inputs: Sequence[Path] = ()) -> Iterator[Path]:
    """Yield an empty temp folder beside `out`; when the block ends normally, or raises KeepPartial, the folder
    (with its manifest) becomes `out`; on any other error it is removed and `out` is untouched. The refusals (see
    the module docstring) come before the block: before any request is sent."""
    pending: BaseException | None = None
    staged = ownership.owned_output(
        out, SWEEP, inputs=inputs, what="sweep's input", overwrite=overwrite, error=BenchError
    )
    with staged as tmp:
        try:
            yield tmp
        except KeepPartial as keep:
            pending = keep.then
        summary_path = tmp / "summary.json"
        summary = load_summary(summary_path) if summary_path.is_file() else {}
        ownership.write_manifest(tmp, SWEEP, manifest_fields(summary))
    if pending is not None:
        raise pending
