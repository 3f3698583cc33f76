"""The report's evaluation section: one pass@k table per protocol group (crosstune.report.eval_groups), each
followed by its paired significance test; the engine and protocol notes and the 95 % intervals
(crosstune.report.eval_stats); the verdict categories, and their charts.

Extension points: EVAL_COLUMNS (a column of every pass@k table) and GROUP_ITEMS (items added after each group's
table — a group holds exactly the evaluations that may be compared, on the same problems with the same samples).
"""

from __future__ import annotations

from collections.abc import Callable

from crosstune.evals.judge.verdict import CATEGORIES
from crosstune.evals.results import Evaluation
from crosstune.report import eval_stats, plots
from crosstune.report.document import Chart, Document, Note, Table
from crosstune.report.eval_groups import EvalGroup, compare_evals, eval_groups


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def group_ks(group: EvalGroup) -> list[str]:
    return sorted({k for e in group.evals for k in e.pass_at_k}, key=int)


# (header, the cell of one evaluation): the columns before the pass@k columns of every table
EVAL_COLUMNS: list[tuple[str, Callable[[Evaluation], str]]] = [
    ("evaluation", lambda e: e.name),
    ("model", lambda e: e.summary.model or "not recorded"),
    ("samples judged", lambda e: str(e.summary.samples)),
]


def pairs(evals: list[Evaluation]) -> list[eval_stats.Named]:
    return [(e.name, e.summary) for e in evals]


def significance(group: EvalGroup) -> list[Table]:
    """The paired test between the group's evaluations that also share an engine (report/eval_stats.py)."""
    table = eval_stats.significance_table(pairs(group.evals))
    return [table] if table else []


# Called with each group after its table; returns more items (notes, tables, charts) for that group.
GROUP_ITEMS: list[Callable[[EvalGroup], list[Note | Table | Chart]]] = [significance]


def not_comparable(evals: list[Evaluation]) -> bool:
    """Evaluations of the same problems produced by different engines or protocols (eval_stats' red notes)."""
    return eval_stats.not_comparable(pairs(evals))


def pass_at_k_table(group: EvalGroup, title: str | None = None) -> Table:
    ks = group_ks(group)
    headers = [h for h, _ in EVAL_COLUMNS] + [f"pass@{k}" for k in ks]
    rows = [[cell(e) for _, cell in EVAL_COLUMNS] + [percent(e.pass_at_k.get(k)) for k in ks] for e in group.evals]
    return Table(title or f"pass@k — {group.title}", headers, rows)


def eval_section(doc: Document, evals: list[Evaluation]) -> None:
    section = doc.section("Evaluation (VerilogEval pass@k)")
    section.items += compare_evals(evals)
    engine_notes = eval_stats.mismatch_notes(pairs(evals))
    section.items += engine_notes
    flagged = set(range(len(evals))) if any(n.level == "error" for n in engine_notes) else set()
    groups = eval_groups(evals)
    if len(groups) > 1:
        section.items.append(
            Note(
                f"{len(groups)} evaluation protocols: each table holds the evaluations of one protocol (same problems, "
                "samples per problem and sampling), the only ones set side by side."
            )
        )
    for group in groups:
        table = pass_at_k_table(group)
        table.flagged = set(range(len(group.evals))) if flagged else set()
        section.items.append(table)
        for extra in GROUP_ITEMS:
            section.items += extra(group)
    section.items.append(eval_stats.interval_table(pairs(evals), flagged))
    section.items.append(
        Chart("pass-at-k", "pass@k per protocol", plots.pass_at_k(groups), "pass@k bars per evaluation protocol")
    )
    codes = [c for c in CATEGORIES if any(e.summary.categories.get(c) for e in evals)]
    rows = [[f"{c}: {CATEGORIES[c]}", *[str(e.summary.categories.get(c, 0)) for e in evals]] for c in codes]
    section.items.append(Table("Verdicts by category (samples)", ["category", *[e.name for e in evals]], rows))
    section.items.append(
        Chart("verdicts", "Verdicts by category", plots.verdict_shares(evals), "verdict categories per evaluation")
    )
