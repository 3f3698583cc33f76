"""Evaluations (the evaluator's summary.json) as the report reads them: `Evaluation`, and `evaluation_at`, the one
reader of that file, which checks its figures where they enter (`read_evaluation`). Which of them may be set side by
side: crosstune.report.eval_groups."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from crosstune.errors import InputError
from crosstune.untrusted_files import read_json


@dataclass(frozen=True)
class Evaluation:
    name: str  # the output folder's name (how the report names it)
    path: Path  # its summary.json
    summary: dict

    @property
    def model(self) -> str:
        """What was evaluated: the summary's `model` (a path or a served name), else the folder's name."""
        return str(self.summary.get("model") or self.name)

    @property
    def pass_at_k(self) -> dict[str, float | None]:
        return self.summary["pass_at_k"]

    @property
    def requested_samples(self) -> int:
        return sum(p["n"] + p.get("failed", 0) for p in self.summary.get("per_problem", []))

    @property
    def failed_samples(self) -> int:
        return sum(p.get("failed", 0) for p in self.summary.get("per_problem", []))


def evaluation_at(path: Path, name: str | None = None) -> Evaluation | None:
    """The evaluator's summary at `path` (summary.json, or the folder holding it) named `name` (default: its
    folder's name), its figures checked; None when the file is not an evaluation's summary (no JSON object with
    pass_at_k)."""
    path = Path(path)
    path = path / "summary.json" if path.is_dir() else path
    try:
        summary = read_json(path)
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or "pass_at_k" not in summary:
        return None
    return read_evaluation(path, path.parent.name if name is None else name, summary)


def read_evaluation(path: Path, name: str, summary: dict) -> Evaluation:
    """An evaluator summary, its figures checked: pass@k in [0, 1] (or null), counts whole numbers >= 0."""
    where = f"{path}"

    def count(value: object, field: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"{where}: {field} is {value!r}, not a whole number >= 0")

    if not isinstance(summary.get("pass_at_k"), dict) or not summary["pass_at_k"]:
        raise InputError(f"{where}: pass_at_k is {summary.get('pass_at_k')!r}, not a mapping of k to pass rates")
    for k, value in summary["pass_at_k"].items():
        if not str(k).isdigit() or int(k) < 1:
            raise InputError(f"{where}: pass_at_k has the key {k!r}: k is a whole number >= 1")
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not 0 <= value <= 1
        ):
            raise InputError(f"{where}: pass_at_k.{k} is {value!r}, not a pass rate in [0, 1] (or null)")
    for field in ("problems", "samples"):
        count(summary.get(field), field)
    categories = summary.get("categories", {})
    if not isinstance(categories, dict):
        raise InputError(f"{where}: categories is {categories!r}, not a mapping of verdict codes to counts")
    for code, n in categories.items():
        count(n, f"categories.{code}")
    per_problem = summary.get("per_problem", [])
    if not isinstance(per_problem, list):
        raise InputError(f"{where}: per_problem is not a list")
    for i, row in enumerate(per_problem):
        if not isinstance(row, dict) or not isinstance(row.get("problem"), str):
            raise InputError(f"{where}: per_problem[{i}] is not a mapping with a `problem` name")
        count(row.get("n"), f"per_problem[{i}].n")
        count(row.get("failed", 0), f"per_problem[{i}].failed")
    sampling = summary.get("sampling")
    if sampling is not None and not isinstance(sampling, dict):
        raise InputError(f"{where}: sampling is {sampling!r}, not a mapping")
    for field in ("temperature", "top_p"):
        value = (sampling or {}).get(field, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise InputError(f"{where}: sampling.{field} is {value!r}, not a finite number >= 0")
    for field in ("n", "max_tokens"):
        if (sampling or {}).get(field) is not None:
            count(sampling[field], f"sampling.{field}")
    return Evaluation(name, path, summary)
