"""The report's sections about serving sweeps and TCO."""

from __future__ import annotations

from crosstune.cost.costs import ServingCost, TrainingCost, serving_costs
from crosstune.cost.prices import PriceBook
from crosstune.cost.tco import Option, Workload, break_even
from crosstune.errors import InputError
from crosstune.report import plots, serving_plots
from crosstune.report.comparability import compare_sweeps
from crosstune.report.document import Chart, Document, Note, Table
from crosstune.report.inputs import ReportError
from crosstune.report.pairing import Pairing
from crosstune.report.sections import num, usd
from crosstune.report.speculation_section import drafter_cost_table
from crosstune.run.run_summary import RunSummary
from crosstune.servebench.summary_cells import Sweep, knee, saturation_point

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


def _usd_per_hour(book: PriceBook, sweep: Sweep) -> float | None:
    """The whole target's $/hour from the price book; None when the sweep names no target or it has no price."""
    if sweep.target is None:
        return None
    try:
        return book.price(sweep.target).per_hour
    except (InputError, KeyError):
        return None


def _cell(sweep: Sweep, context: int, concurrency: int):
    return next(c for c in sweep.at(context) if c.concurrency == concurrency)


def serving_section(
    doc: Document, sweeps: list[Sweep], book: PriceBook, slo: dict[str, float] | None
) -> list[list[ServingCost] | None]:
    """The sweeps' charts, operating points, comparison and cost; returns each sweep's saturation costs (None: no
    price), in the order of `sweeps`."""
    section = doc.section("Serving")
    notes = compare_sweeps(sweeps)
    section.items += notes
    section.items += _charts(sweeps, book)
    section.items += _operating_points(sweeps)
    if len(sweeps) >= 2:
        table = _compare_table(sweeps[0], sweeps[1])
        if any(n.level == "error" for n in notes):
            table.flagged = set(range(len(table.rows)))
        section.items.append(table)
    costs, items = _costs(sweeps, book, slo)
    section.items += items
    if drafter := drafter_cost_table(sweeps, costs):
        section.items.append(drafter)
    return costs


def _charts(sweeps: list[Sweep], book: PriceBook) -> list[Chart]:
    """The sweeps by load, by context length, and their Pareto frontier (per chip and per dollar)."""
    items: list[Chart] = []
    items.append(
        Chart(
            "serving",
            "Serving sweeps: one colour per sweep, one column per context length",
            serving_plots.serving_sweeps(sweeps, TTFT),
            "output throughput and TTFT against the load, per context length",
        )
    )
    items.append(
        Chart(
            "serving-contexts",
            "By context length",
            serving_plots.serving_contexts(sweeps, TTFT),
            "peak output throughput and unloaded TTFT against the context length",
        )
    )
    items.append(
        Chart(
            "serving-pareto",
            "Pareto frontier: interactivity against throughput per chip and per dollar",
            serving_plots.serving_pareto(sweeps, [_usd_per_hour(book, s) for s in sweeps]),
            "output tokens/s per user against output tokens/s per chip and output tokens per $ (price book), every "
            "cell a point, each sweep's frontier a line",
        )
    )
    return items


def _operating_points(sweeps: list[Sweep]) -> list[Note | Table]:
    """Per sweep and context: the saturation point, the knee and the latencies at the peak (a warning where none)."""
    items: list[Note | Table] = []
    rows = []
    for s in sweeps:
        for context in s.contexts:
            try:
                sat, k = saturation_point(s, context), knee(s, context)
            except InputError as e:
                rows.append([s.label, str(context), *["n/a"] * 6, str(sum(c.failed for c in s.at(context)))])
                items.append(Note(str(e), "warn"))
                continue
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
    items.append(Table("Operating points per context", headers, rows))
    return items


def _costs(
    sweeps: list[Sweep], book: PriceBook, slo: dict[str, float] | None
) -> tuple[list[list[ServingCost] | None], list[Note | Table]]:
    """Each sweep's serving cost per context at saturation (and at the SLO's point), and the table of them."""
    items: list[Note | Table] = []
    costs: list[list[ServingCost] | None] = [None] * len(sweeps)
    rows = []
    for i, s in enumerate(sweeps):
        for policy in [None, slo] if slo else [None]:
            try:
                found = serving_costs(s, book, slo=policy)
            except InputError as e:
                items.append(Note(f"{s.label}: {e}", "warn"))
                break
            if policy is None:
                costs[i] = found
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
        items.append(Table("Serving cost", headers, rows))
    return costs, items


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


def tco_context(sweeps: list[Sweep], context: int | None) -> int | None:
    """The context TCO prices serving at: `context` when every sweep measured it (else an error naming what each
    measured), by default the largest context all of them measured (None: they share none)."""
    shared = set.intersection(*(set(s.contexts) for s in sweeps)) if sweeps else set()
    if context is not None:
        lacking = [s for s in sweeps if context not in s.contexts]
        if lacking:
            measured = "; ".join(f"{s.label}: {', '.join(map(str, s.contexts))}" for s in lacking)
            raise ReportError(
                f"--context {context}: not measured by every sweep priced ({measured}); choose one they all measured"
            )
        return context
    return max(shared) if shared else None


def tco_section(
    doc: Document,
    runs: list[RunSummary],
    train_costs: list[TrainingCost | None],
    sweeps: list[Sweep],
    serving: list[list[ServingCost] | None],
    workload: Workload,
    context: int | None,
    pairing: Pairing,
) -> None:
    """One option per run paired with the sweep of what it trained (crosstune.report.pairing), priced at one
    context length shared by every option's sweep."""
    section = doc.section("Total cost of ownership")
    section.items += pairing.notes
    pairs = []
    for i, j in pairing.pairs:
        run, train, sweep = runs[i], train_costs[i], sweeps[j]
        if train is None or not serving[j]:
            section.items.append(
                Note(
                    f"no TCO option for {run.label} + {sweep.label}: one of them has no price "
                    "(runs on cpu have none: pass --prices)",
                    "warn",
                )
            )
        else:
            pairs.append((train, sweep, serving[j]))
    if not pairs:
        return
    at = tco_context([sweep for _, sweep, _ in pairs], context)
    if at is None:
        measured = "; ".join(f"{s.label}: {', '.join(map(str, s.contexts))}" for _, s, _ in pairs)
        section.items.append(Note(f"no context length measured by every paired sweep ({measured}): no TCO", "warn"))
        return
    options = []
    for train, _, costs in pairs:
        serve = next(c for c in costs if c.context_len == at)
        options.append(Option(f"{train.label} → {serve.sweep} @ ctx {at}", train, serve))
    section.items.append(
        Note(
            workload.describe() + "; training includes compile and checkpoint time where "
            f"recorded. Serving billed at each sweep's saturation point, at context {at}."
        )
    )
    rows = []
    for o in options:
        try:
            rows.append([o.name, usd(o.train_usd), usd(o.serve_usd_per_day(workload)), usd(o.total(workload))])
        except InputError as e:
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
