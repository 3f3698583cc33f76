"""Sorts the report's inputs: run directories, evaluation outputs and serving sweep summaries."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from crosstune.compare.prices import CostError
from crosstune.compare.runs import RunSummary, read_run
from crosstune.compare.sweeps import Sweep, read_sweep
from crosstune.run.layout import is_run_dir


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


def read_inputs(paths: list[Path]) -> Inputs:
    """A run dir has run.json; an eval dir (or file) a summary.json with pass_at_k; a sweep a summary with cells."""
    found = Inputs()
    for path in map(Path, paths):
        if not path.exists():
            raise CostError(f"{path}: no such file or directory")
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
