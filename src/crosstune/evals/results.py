"""Evaluations (the evaluator's summary.json) as the report and the demo read them: `EvalSummary`, the file read into
its schema (what crosstune.evals.judge.scoring.summarize and the runner write), `Evaluation`, and `evaluation_at`,
the one reader of that file, which checks its figures where they enter. Which of them may be set side by side:
crosstune.report.eval_groups."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from crosstune.confinement import inside
from crosstune.errors import InputError
from crosstune.untrusted_files import read_json


def _expect(what: str, ok: Callable[[Any], bool]) -> BeforeValidator:
    """A figure checked as it enters: refused saying what it should be (`_refusal` quotes the value)."""

    def check(value: Any) -> Any:
        if not ok(value):
            raise ValueError(what)
        return value

    return BeforeValidator(check)


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


Count = Annotated[int, _expect("a whole number >= 0", lambda v: type(v) is int and v >= 0)]
PassRate = Annotated[
    float | None, _expect("a pass rate in [0, 1] (or null)", lambda v: v is None or (_number(v) and 0 <= v <= 1))
]
Rate = Annotated[float, _expect("a finite number >= 0", lambda v: _number(v) and v >= 0)]
K = Annotated[str, _expect("a whole number >= 1 (k)", lambda v: isinstance(v, str) and v.isdigit() and int(v) >= 1)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow")  # what a newer evaluator adds is kept, not refused


class ProblemRow(_Record):
    problem: str
    n: Count
    failed: Count = 0
    passed: Count | None = None
    pass_at_k: dict[str, PassRate] = Field(default_factory=dict)


class Sampling(_Record):
    """How completions were sampled (generation.cache.SamplingParams); absent for a samples file or references."""

    n: Count | None = None
    temperature: Rate = 0.0
    top_p: Rate = 0.0
    max_tokens: Count | None = None


class Engine(_Record):
    name: str | None = None
    kind: str | None = None  # local, endpoint, reference or mixed (written by evals.generation and evals.runner)


class ProtocolRecord(_Record):
    """evals.problems.protocols.protocol_record: the protocol's name, the settings used and any departure."""

    name: str = "?"
    settings: dict[str, Any] = Field(default_factory=dict)
    deviations: dict[str, Any] = Field(default_factory=dict)


class FailedSample(_Record):
    problem: str
    sample: Count
    reason: str


class Generation(_Record):
    """How the completions judged came about (crosstune.evals.evaluate; absent when the references were judged):
    requested, completed and failed samples, and how many came from the completion cache (None: not recorded)."""

    requested: Count
    completed: Count
    failed: Count
    failed_samples: list[FailedSample]
    from_cache: Count | None = None


class EvalSummary(_Record):
    problems: Count
    samples: Count
    pass_at_k: Annotated[dict[K, PassRate], Field(min_length=1)]
    pass_at_k_ci: dict[str, list[float] | None] | None = None
    pass_at_k_ci_method: dict[str, Any] | None = None
    mode: str | None = None  # the verdict: strict or upstream_compatible
    categories: dict[str, Count] = Field(default_factory=dict)
    per_problem: list[ProblemRow] = Field(default_factory=list)
    task: str | None = None
    model: str | None = None
    sampling: Sampling | None = None
    prompt_style: str | None = None
    shots: int | None = None
    engine: Engine | None = None
    protocol: ProtocolRecord | None = None
    generation: Generation | None = None  # None: the references were judged, not completions


@dataclass(frozen=True)
class Evaluation:
    name: str  # the output folder's name (how the report names it)
    path: Path  # its summary.json
    summary: EvalSummary

    @property
    def model(self) -> str:
        """What was evaluated: the summary's `model` (a path or a served name), else the folder's name."""
        return self.summary.model or self.name

    @property
    def pass_at_k(self) -> dict[str, float | None]:
        return self.summary.pass_at_k

    @property
    def requested_samples(self) -> int:
        return sum(p.n + p.failed for p in self.summary.per_problem)

    @property
    def failed_samples(self) -> int:
        return sum(p.failed for p in self.summary.per_problem)


def evaluation_at(path: Path, name: str | None = None) -> Evaluation | None:
    """The evaluator's summary at `path` (summary.json, or the folder holding it) named `name` (default: its
    folder's name), its figures checked; None when the file is not an evaluation's summary (no JSON object with
    pass_at_k)."""
    path = Path(path)
    if path.is_dir():  # its summary.json may not be a link out of it (a ConfinementError)
        inside(path, "summary.json", label="the folder")
        path = path / "summary.json"
    try:
        summary = read_json(path)
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or "pass_at_k" not in summary:
        return None
    return Evaluation(path.parent.name if name is None else name, path, read_summary(path, summary))


def read_summary(path: Path, data: dict) -> EvalSummary:
    """An evaluator summary read into its schema, its figures checked: pass@k in [0, 1] (or null), counts whole
    numbers >= 0; else an InputError naming the file and the field."""
    try:
        return EvalSummary.model_validate(data)
    except ValidationError as e:
        raise InputError(f"{path}: {_refusal(e.errors()[0])}") from None


def _refusal(error: dict) -> str:
    where = ".".join(str(part) for part in error["loc"] if part != "[key]")
    if error["type"] == "value_error":  # an _expect check: the value and what it should be
        return f"{where} is {error['input']!r}, not {error['ctx']['error']}"
    if error["type"] == "missing":
        return f"{where} is missing"
    return f"{where} is {error['input']!r}: {error['msg'].lower()}"
