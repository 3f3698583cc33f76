"""Which evaluations (crosstune.evals.results) the report may set side by side.

Like is compared with like: evaluations are grouped by their protocol (PROTOCOL: task, verdict, problem set,
samples per problem, sampling, max tokens, prompt) and only evaluations of one group are put next to each other.
A report may hold several groups (the demo: greedy pass@1 on 60 problems, and 5 samples at T=0.8 on 8 of them, for
each of three models): that is no mismatch. A mismatch is two models that share no protocol — nothing about them
can be compared — and it is flagged in red with what differs between their closest evaluations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from crosstune.evals.results import EvalSummary, Evaluation
from crosstune.report.document import Note


def _problems(s: EvalSummary) -> tuple:
    return tuple(sorted(p.problem for p in s.per_problem))


def _samples(s: EvalSummary) -> object:
    if s.sampling is not None and s.sampling.n is not None:
        return s.sampling.n
    requested = {p.n + p.failed for p in s.per_problem}
    return next(iter(requested)) if len(requested) == 1 else tuple(sorted(requested))


def _sampling(s: EvalSummary) -> object:
    if s.sampling is None:
        return None  # a samples file or references: nothing says how the designs were sampled
    if s.sampling.temperature == 0:
        return "greedy"  # top_p and the seed change nothing at temperature 0
    return f"T={s.sampling.temperature:g}, top_p={s.sampling.top_p:g}"


# (label, what it is in one summary): evaluations are comparable when every value is equal. Extend here.
PROTOCOL: list[tuple[str, Callable[[EvalSummary], object]]] = [
    ("task", lambda s: s.task),
    ("verdict", lambda s: s.mode),
    ("problem set", _problems),
    ("samples per problem", _samples),
    ("sampling", _sampling),
    ("max tokens", lambda s: s.sampling.max_tokens if s.sampling is not None else None),
    ("prompt", lambda s: (s.prompt_style, s.shots)),
]


def protocol(e: Evaluation) -> tuple:
    return tuple(get(e.summary) for _, get in PROTOCOL)


@dataclass(frozen=True)
class EvalGroup:
    """Evaluations with one protocol: the ones a table, a chart or a paired test may set side by side."""

    evals: list[Evaluation]

    @property
    def title(self) -> str:
        s = self.evals[0].summary
        sampling = _sampling(s) or "sampling not recorded"
        n = _samples(s)
        samples = f"{n} sample{'' if n == 1 else 's'} each"
        return f"{s.problems} problems × {samples}, {sampling}, {s.mode or '?'} verdict"


def eval_groups(evals: list[Evaluation]) -> list[EvalGroup]:
    """Evaluations grouped by protocol, in the order they were given."""
    groups: dict[tuple, list[Evaluation]] = {}
    for e in evals:
        groups.setdefault(protocol(e), []).append(e)
    return [EvalGroup(members) for members in groups.values()]


def unmatched(evals: list[Evaluation]) -> list[tuple[Evaluation, Evaluation, list[tuple[str, object, object]]]]:
    """For every two models that share no protocol: their closest evaluations and how those differ."""
    groups = [{e.model for e in g.evals} for g in eval_groups(evals)]
    models = list(dict.fromkeys(e.model for e in evals))
    return [
        _closest(evals, a, b)
        for i, a in enumerate(models)
        for b in models[i + 1 :]
        if not any(a in g and b in g for g in groups)
    ]


def compare_evals(evals: list[Evaluation]) -> list[Note]:
    """Red notes for models that share no protocol (nothing of them is comparable); warnings for failed samples."""
    notes = []
    for x, y, diffs in unmatched(evals):
        shown = "; ".join(f"{label}: {_short(u)} vs {_short(v)}" for label, u, v in diffs)
        notes.append(Note(f"the evaluations of {x.name} and {y.name} differ in {shown}", "error"))
    for e in evals:
        if e.failed_samples:
            notes.append(
                Note(
                    f"{e.name}: {e.failed_samples} of {e.requested_samples} samples failed to generate; its pass@k "
                    "is over the completed samples",
                    "warn",
                )
            )
    return notes


def _closest(
    evals: list[Evaluation], a: str, b: str
) -> tuple[Evaluation, Evaluation, list[tuple[str, object, object]]]:
    """The evaluations of models a and b whose protocols differ least, and how they differ."""
    best = None
    for x in (e for e in evals if e.model == a):
        for y in (e for e in evals if e.model == b):
            diffs = [
                (label, u, v) for (label, _), u, v in zip(PROTOCOL, protocol(x), protocol(y), strict=True) if u != v
            ]
            if best is None or len(diffs) < len(best[2]):
                best = (x, y, diffs)
    assert best is not None
    return best


def _short(value: object) -> str:
    if isinstance(value, tuple) and len(value) > 3:
        return f"{len(value)} items ({', '.join(map(str, value[:3]))}, …)"
    return str(value)
