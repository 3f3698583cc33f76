"""Sorts the report's inputs: run directories, evaluation outputs, serving sweep summaries, and study bundles
(`crosstune study`), each of which contributes its run, its evaluations and its sweeps.

Each kind has one reader; `read_inputs` asks, for every path, which kind it is (KINDS, in order) and reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crosstune.errors import InputError
from crosstune.evals.results import Evaluation, evaluation_at
from crosstune.run.layout import is_run_dir
from crosstune.run.run_summary import RunSummary, read_run
from crosstune.servebench.summary import is_sweep_summary
from crosstune.servebench.summary_cells import Sweep, read_sweep
from crosstune.study.bundle_schema import BUNDLE_MANIFEST, CONTENT_KEYS, read_bundle_manifest

__all__ = ["BUNDLE_MANIFEST", "Inputs", "ReportError", "bundle_contents", "read_inputs"]  # BUNDLE_MANIFEST: its owner's


class ReportError(InputError):
    """A report that can't be made as asked (a --pair, a --context, its folder); the message says what to give."""


@dataclass
class Inputs:
    runs: list[RunSummary] = field(default_factory=list)
    evals: list[Evaluation] = field(default_factory=list)
    sweeps: list[Sweep] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        """Every file or folder the report read (an --out must not replace any of them)."""
        return [r.path for r in self.runs] + [e.path for e in self.evals] + [s.path for s in self.sweeps]


def _add_run(found: Inputs, path: Path) -> bool:
    if not (path.is_dir() and is_run_dir(path)):
        return False
    found.runs.append(read_run(path))
    return True


def _add_eval(found: Inputs, path: Path) -> bool:
    evaluation = evaluation_at(path)
    if evaluation is not None:
        found.evals.append(evaluation)
    return evaluation is not None


def _add_sweep(found: Inputs, path: Path) -> bool:
    if not is_sweep_summary(path):
        return False
    found.sweeps.append(read_sweep(path))
    return True


def bundle_contents(bundle: Path) -> dict[str, list[Path]]:
    """{"runs" | "evals" | "sweeps": [absolute paths]} of a study bundle, from its manifest's `contents`; a listed
    folder that is missing (a stage not run yet, or skipped) is an error naming it. The manifest is checked against
    its schema first (study/bundle_schema.py): every listed path is inside this bundle, never in another one."""
    manifest_path = Path(bundle) / BUNDLE_MANIFEST
    manifest = read_bundle_manifest(bundle)
    if manifest is None:
        raise InputError(f"{manifest_path}: no such file: give a study bundle's folder")
    out: dict[str, list[Path]] = {}
    for key in CONTENT_KEYS:
        paths = [Path(bundle) / rel for rel in getattr(manifest.contents, key)]
        missing = [p for p in paths if not p.exists()]
        if missing:
            raise InputError(f"{manifest_path}: lists {missing[0]}, which is missing: finish the study (rerun it)")
        out[key] = paths
    return out


def _add_bundle(found: Inputs, path: Path) -> bool:
    if not (path.is_dir() and (path / BUNDLE_MANIFEST).is_file()):
        return False
    contents = bundle_contents(path)
    found.runs += [read_run(run) for run in contents["runs"]]
    for folder in contents["evals"]:
        evaluation = evaluation_at(folder, f"{path.name} · {folder.name}")
        if evaluation is None:
            raise InputError(f"{folder / 'summary.json'}: not an evaluation summary (no pass_at_k)")
        found.evals.append(evaluation)
    found.sweeps += [read_sweep(s) for s in contents["sweeps"]]
    return True


# (what it is, reader: adds the input and returns True when the path is of its kind)
KINDS: list[tuple[str, Callable[[Inputs, Path], bool]]] = [
    ("a study bundle (bundle.json)", _add_bundle),
    ("a run directory (run.json)", _add_run),
    ("an evaluation (summary.json with pass_at_k)", _add_eval),
    ("a bench sweep summary (JSON with cells)", _add_sweep),
]


def read_inputs(paths: list[Path]) -> Inputs:
    """Read every path by the first kind that recognises it; an unknown one is an error listing the kinds."""
    found = Inputs()
    for path in map(Path, paths):
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
        if not any(add(found, path) for _, add in KINDS):
            raise InputError(f"{path}: not {', '.join(kind for kind, _ in KINDS[:-1])} or {KINDS[-1][0]}")
    return found


def parse_pairs(items: list[str]) -> list[tuple[Path, Path]]:
    """`--pair RUN_DIR=SUMMARY` values as (run, sweep) paths; one that is not of that form is a ReportError."""

    pairs = []
    for item in items:
        run, sep, sweep = item.partition("=")
        if not sep or not run or not sweep:
            raise ReportError(f"--pair {item!r}: expected RUN_DIR=SUMMARY (a run directory = a bench summary.json)")
        pairs.append((Path(run), Path(sweep)))
    return pairs
