"""The report's output folder: written whole into a temp folder beside it and swapped into place (crosstune.ownership.
owned_output), with .crosstune-report.json, the one manifest shape (sha256 and size of every file the report
wrote). An existing folder is replaced only when it is an earlier report holding nothing but the files its
manifest lists, unchanged; an --out that is or holds an input, or that names a file, is refused before any work."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from crosstune import ownership
from crosstune.report.inputs import ReportError

MANIFEST = ".crosstune-report.json"
REPORT = ownership.OutputKind("crosstune report", MANIFEST)


def check_out(out: Path, inputs: list[Path]) -> None:
    """Refuse an --out that names a file, sits under a file, or would replace one of the report's inputs."""
    ownership.check_out(out, inputs=inputs, what="report's input", error=ReportError)


@contextlib.contextmanager
def report_folder(out: Path, inputs: list[Path]) -> Iterator[Path]:
    """Yield an empty temp folder; when the block succeeds it becomes `out`, with the manifest of its files."""
    with ownership.owned_output(out, REPORT, inputs=inputs, what="report's input", error=ReportError) as tmp:
        yield tmp
        ownership.write_manifest(tmp, REPORT)
