"""The report's sections about serving sweeps, evaluations, TCO and the seed-style summary."""

from __future__ import annotations

from crosstune.compare import eval_stats, plots
from crosstune.compare.comparability import compare_evals
from crosstune.compare.cost import ServingCost, TrainingCost, serving_costs
from crosstune.compare.document import Chart, Document, Note, Table
from crosstune.compare.prices import CostError, PriceBook
from crosstune.compare.runs import RunSummary
from crosstune.compare.sections import num, usd
from crosstune.compare.sweeps import Sweep, knee, saturation_point
from crosstune.compare.tco import Option, Workload, break_even
from crosstune.evals.verdict import CATEGORIES

TTFT = "median_ttft_ms"


def common_concurrency(a: Sweep, b: Sweep, context: int) -> int | None:
    """The highest concurrency both sweeps measured at or below both knees: loaded, but not yet queueing on either
    (past a knee, TTFT measures the queue); the lowest shared one when no shared load is below both knees."""
    shared = sorted({c.concurrency for c in a.at(context)} & {c.concurrency for c in b.at(context)})
    if not shared:
        return None
    limit = min(knee(a, context).concurrency, knee(b, context).concurrency)
    below = [c for c in shared if c <= limit]
    return below[-1] if below else shared[0]


def _cell(sweep: Sweep, context: int, concurrency: int):
    return next(c for c in sweep.at(context) if c.concurrency == concurrency)


def serving_section(
    doc: Document, sweeps: list[Sweep], book: PriceBook, slo: dict[str, float] | None
) -> dict[str, list[ServingCost]]:
    section = doc.section("Serving")
    section.items.append(
        Chart(
            "serving",
            "Serving sweeps",
            plots.serving_sweeps(sweeps, TTFT),
            "output throughput and TTFT against concurrency",
        )
    )
    rows = []
    for s in sweeps:
        for context in s.contexts:
            sat, k = saturation_point(s, context), knee(s, context)
            rows.append(
                [
                    s.label,
                    str(context),
                    str(sat.concurrency),
                    num(sat.output_throughput, 1),
                    str(k.concurrency),
                    num(sat.latency(TTFT), 0),
                    num(sat.latency("p99_ttft_ms"), 0),
                    num(sat.latency("median_tpot_ms"), 1),
                    str(sum(c.failed for c in s.at(context))),
                ]
            )
    headers = [
        "sweep",
        "context",
        "saturation concurrency",
        "peak output tok/s",
        "knee (95 %) concurrency",
        "median TTFT at peak (ms)",
        "p99 TTFT at peak (ms)",
        "median TPOT at peak (ms)",
        "failed requests",
    ]
    section.items.append(Table("Operating points per context", headers, rows))
    if len(sweeps) >= 2:
        section.items.append(_compare_table(sweeps[0], sweeps[1]))
    costs: dict[str, list[ServingCost]] = {}
    rows = []
    for s in sweeps:
        for policy in [None, slo] if slo else [None]:
            try:
                found = serving_costs(s, book, slo=policy)
            except CostError as e:
                section.items.append(Note(f"{s.label}: {e}", "warn"))
                break
            if policy is None:
                costs[s.label] = found
            for c in found:
                rows.append(
                    [
                        s.label,
                        str(c.context_len),
                        c.policy,
                        "n/a" if c.cell is None else str(c.cell.concurrency),
                        "n/a" if c.price is None else f"{usd(c.price.per_hour)}/h",
                        usd(c.usd_per_m_output),
                        c.error or "",
                    ]
                )
    if rows:
        headers = ["sweep", "context", "operating point", "concurrency", "price", "$ / 1M output tokens", "note"]
        section.items.append(Table("Serving cost", headers, rows))
    return costs


def _compare_table(a: Sweep, b: Sweep) -> Table:
    """`bench compare`: per context, b's figures over a's at the same concurrency and at each one's peak."""
    rows = []
    for context in sorted(set(a.contexts) & set(b.contexts)):
        conc = common_concurrency(a, b, context)
        ca, cb = (_cell(a, context, conc), _cell(b, context, conc)) if conc else (None, None)
        ttft = _ratio(cb.latency(TTFT), ca.latency(TTFT)) if ca else None
        peak = _ratio(saturation_point(b, context).output_throughput, saturation_point(a, context).output_throughput)
        rows.append(
            [
                str(context),
                str(conc),
                num(ca.latency(TTFT) if ca else None),
                num(cb.latency(TTFT) if cb else None),
                "n/a" if ttft is None else f"{ttft:.2f}×",
                "n/a" if peak is None else f"{peak:.2f}×",
            ]
        )
    headers = [
        "context",
        "concurrency",
        f"{a.label} median TTFT (ms)",
        f"{b.label} median TTFT (ms)",
        f"TTFT {b.label} / {a.label}",
        f"peak output tok/s {b.label} / {a.label}",
    ]
    return Table(f"Compare: {b.label} vs {a.label}", headers, rows)


def _ratio(x: float | None, y: float | None) -> float | None:
    return None if x is None or not y else x / y


def eval_section(doc: Document, evals: list[tuple[str, dict]]) -> None:
    section = doc.section("Evaluation (VerilogEval pass@k)")
    section.items += compare_evals(evals)
    mismatched = any(n.level == "error" for n in compare_evals(evals)) or eval_stats.not_comparable(evals)
    flagged = {i for i in range(len(evals))} if mismatched else set()
    ks = sorted({k for _, s in evals for k in s["pass_at_k"]}, key=int)
    rows = [
        [
            name,
            str(s["problems"]),
            str(s["samples"]),
            s.get("mode", "?"),
            *[num(100 * s["pass_at_k"][k], 1) + " %" if s["pass_at_k"].get(k) is not None else "n/a" for k in ks],
        ]
        for name, s in evals
    ]
    section.items.append(
        Table("pass@k", ["evaluation", "problems", "samples", "verdict", *[f"pass@{k}" for k in ks]], rows, flagged)
    )
    section.items += eval_stats.uncertainty_items(evals)
    codes = [c for c in CATEGORIES if any(s["categories"].get(c) for _, s in evals)]
    rows = [[f"`{c}` {CATEGORIES[c]}", *[str(s["categories"].get(c, 0)) for _, s in evals]] for c in codes]
    section.items.append(Table("Verdicts by category (samples)", ["category", *[n for n, _ in evals]], rows))
    section.items.append(
        Chart("eval", "pass@k and failure categories", plots.eval_scores(evals), "pass@k bars and verdict categories")
    )


def tco_section(
    doc: Document,
    runs: list[RunSummary],
    train_costs: list[TrainingCost | None],
    sweeps: list[Sweep],
    serving: dict[str, list[ServingCost]],
    workload: Workload,
    context: int | None,
) -> None:
    """Option i = run i trained, then served as sweep i measured (in the order given; targets may differ)."""
    section = doc.section("Total cost of ownership")
    pairs = []
    for run, train, sweep in zip(runs, train_costs, sweeps, strict=False):
        if train is None or not serving.get(sweep.label):
            section.items.append(Note(f"no TCO option for {run.label} + {sweep.label}: one of them has no price "
                                      "(runs on cpu have none: pass --prices)", "warn"))  # fmt: skip
        else:
            pairs.append((train, serving[sweep.label]))
    if not pairs:
        return
    options = []
    for train, costs in pairs:
        contexts = [c.context_len for c in costs]
        at = context if context in contexts else max(contexts)
        serve = next(c for c in costs if c.context_len == at)
        options.append(Option(f"{train.label} → {serve.sweep} @ ctx {at}", train, serve))
    section.items.append(
        Note(
            workload.describe() + "; training includes compile and checkpoint time where "
            "recorded. Serving billed at each sweep's saturation point."
        )
    )
    rows = []
    for o in options:
        try:
            rows.append([o.name, usd(o.train_usd), usd(o.serve_usd_per_day(workload)), usd(o.total(workload))])
        except CostError as e:
            section.items.append(Note(str(e), "warn"))
            return
    section.items.append(Table("TCO", ["option", "training", "serving per day", "total"], rows))
    crossing = None
    if len(options) >= 2:
        be = break_even(options[0], options[1], workload)
        crossing = be.days
        ratio = options[1].total(workload) / options[0].total(workload)
        section.items.append(Note(f"Break-even: {be.message}. Total ratio (second / first): {ratio:.2f}×."))
    section.items.append(
        Chart("tco", "TCO over time", plots.tco_lines(options, workload, crossing), "cumulative cost by day")
    )
