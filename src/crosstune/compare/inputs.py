"""Sorts the report's inputs: run directories, evaluation outputs, serving sweep summaries, and study bundles
(`crosstune study`), each of which contributes its run, its evaluations and its sweeps."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from crosstune.compare.prices import CostError
from crosstune.compare.runs import RunSummary, read_run
from crosstune.compare.sweeps import Sweep, read_sweep
from crosstune.run.layout import is_run_dir

# A study bundle's manifest (written by crosstune.study; its `contents` lists the bundle's run, evaluation and sweep
# folders relative to the bundle). The report needs only that index, so the name lives here, below the writer.
BUNDLE_MANIFEST = "bundle.json"
BUNDLE_KIND = "crosstune-study"


@dataclass
class Inputs:
    runs: list[RunSummary] = field(default_factory=list)
    evals: list[tuple[str, dict]] = field(default_factory=list)  # (name, the evaluator's summary.json)
    sweeps: list[Sweep] = field(default_factory=list)


def _json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def bundle_contents(bundle: Path) -> dict[str, list[Path]]:
    """{"runs" | "evals" | "sweeps": [absolute paths]} of a study bundle, from its manifest's `contents`; a listed
    folder that is missing (a stage not run yet, or skipped) is an error naming it."""
    manifest_path = Path(bundle) / BUNDLE_MANIFEST
    manifest = _json(manifest_path)
    if manifest is None or manifest.get("kind") != BUNDLE_KIND or not isinstance(manifest.get("contents"), dict):
        raise CostError(f"{manifest_path}: not a study bundle's manifest (kind {BUNDLE_KIND!r} with `contents`)")
    out: dict[str, list[Path]] = {}
    for key in ("runs", "evals", "sweeps"):
        paths = [Path(bundle) / rel for rel in manifest["contents"].get(key, [])]
        missing = [p for p in paths if not p.exists()]
        if missing:
            raise CostError(f"{manifest_path}: lists {missing[0]}, which is missing: finish the study (rerun it)")
        out[key] = paths
    return out


def read_inputs(paths: list[Path]) -> Inputs:
    """A run dir has run.json; an eval dir (or file) a summary.json with pass_at_k; a sweep a summary with cells;
    a study bundle its manifest (bundle.json), which adds the bundle's run, evaluations and sweeps."""
    found = Inputs()
    for path in map(Path, paths):
        if not path.exists():
            raise CostError(f"{path}: no such file or directory")
        if path.is_dir() and (path / BUNDLE_MANIFEST).is_file():
            contents = bundle_contents(path)
            found.runs += [read_run(run) for run in contents["runs"]]
            found.evals += [(f"{path.name} · {e.name}", _eval_summary(e)) for e in contents["evals"]]
            found.sweeps += [read_sweep(s) for s in contents["sweeps"]]
            continue
        if path.is_dir() and is_run_dir(path):
            found.runs.append(read_run(path))
            continue
        summary = path / "summary.json" if path.is_dir() else path
        data = _json(summary)
        if data is not None and "pass_at_k" in data:
            name = path.name if path.is_dir() else path.parent.name
            found.evals.append((name, data))
        elif data is not None and ("cells" in data or "results" in data):
            found.sweeps.append(read_sweep(summary))
        else:
            raise CostError(
                f"{path}: not a run directory (run.json), an evaluation (summary.json with pass_at_k) "
                "or a bench sweep summary (JSON with cells)"
            )
    return found


def _eval_summary(folder: Path) -> dict:
    data = _json(folder / "summary.json")
    if data is None or "pass_at_k" not in data:
        raise CostError(f"{folder / 'summary.json'}: not an evaluation summary (no pass_at_k)")
    return data
