"""`write_report(inputs, out_dir)`: a side-by-side report of runs, evaluations and serving sweeps.

Writes <out>/report.md (charts as <out>/charts/*.png) and <out>/report.html (one self-contained file: charts
inlined as base64 PNG, no external resource), through crosstune.report.report_folder (a temp folder swapped
into place; only an earlier report is replaced). Inputs that cannot be compared are flagged in red.
"""

from __future__ import annotations

from pathlib import Path

from crosstune.cost.costs import ServingCost, TrainingCost
from crosstune.cost.prices import PriceBook
from crosstune.cost.source_study import (
    SEED_TCO_RATIO,
    SEED_TCO_WORKLOAD,
    gpu_serving_bill_for_ratio,
    seed_options,
)
from crosstune.cost.tco import Workload, tco_ratio
from crosstune.report.comparability import compare_sweeps
from crosstune.report.document import Document, Note, Table, to_markdown
from crosstune.report.eval_groups import compare_evals, eval_groups, unmatched
from crosstune.report.eval_section import eval_section, not_comparable, pass_at_k_table
from crosstune.report.html import to_html
from crosstune.report.inputs import Inputs, read_inputs
from crosstune.report.pairing import pair_runs_with_sweeps
from crosstune.report.report_folder import check_out, report_folder
from crosstune.report.sections import differences_section, num, training_cost_section, training_section, usd
from crosstune.report.serving_sections import TTFT, common_concurrency, serving_section, tco_section

DEFAULT_WORKLOAD = Workload(days=30, serve_tokens_per_day=10e6)


def build_report(
    inputs: Inputs,
    book: PriceBook | None = None,
    slo: dict[str, float] | None = None,
    workload: Workload = DEFAULT_WORKLOAD,
    context: int | None = None,
    pairs: list[tuple[Path, Path]] | None = None,
) -> Document:
    """The report as a Document. `pairs`: (run dir, sweep summary) the user declares for TCO (`--pair`), on top of
    what the sweeps declare themselves (crosstune.report.pairing)."""
    book = book or PriceBook()
    pairing = pair_runs_with_sweeps(inputs.runs, inputs.sweeps, pairs)  # a contradicted --pair fails before any work
    doc = Document("crosstune report")
    summary = doc.section("Summary")
    notes: list[Note] = []
    train_costs: list[TrainingCost | None] = []
    serving: list[list[ServingCost] | None] = []
    if inputs.runs:
        notes = differences_section(doc, inputs.runs)
        training_section(doc, inputs.runs, notes)
        train_costs = training_cost_section(doc, inputs.runs, book)
    if inputs.sweeps:
        serving = serving_section(doc, inputs.sweeps, book, slo)
    if inputs.evals:
        eval_section(doc, inputs.evals)
    if inputs.runs and inputs.sweeps:
        tco_section(doc, inputs.runs, train_costs, inputs.sweeps, serving, workload, context, pairing)
    _seed_section(doc, book)
    used = [c.price for c in train_costs if c] + [c.price for cs in serving if cs for c in cs if c.price]
    _prices_section(
        doc, used + [o.train.price for o in seed_options(book=book)] + [o.serve.price for o in seed_options(book=book)]
    )
    summary.items += _summary(inputs, train_costs, serving, notes)
    summary.items.append(Note("Inputs: " + ", ".join(map(str, inputs.paths))))
    return doc


def _ratio_text(a: float | None, b: float | None, names: tuple[str, str], better: str, higher_is_better: bool) -> str:
    if a is None or b is None or not a or not b:
        return "n/a"
    first_wins = a > b if higher_is_better else a < b
    hi, lo = (max(a, b), min(a, b))
    return f"{names[0] if first_wins else names[1]} {hi / lo:.2f}× {better}"


def _summary(inputs: Inputs, costs: list, serving: list[list[ServingCost] | None], notes: list[Note]) -> list:
    """The seed-style headline: speed-up, cost ratio, TTFT ratio by context, pass@1 / pass@5."""
    items: list = [n for n in notes if n.level == "error"]
    rows: list[list[str]] = []
    flagged: set[int] = set()
    if len(inputs.runs) >= 2:
        a, b = inputs.runs[:2]
        names = (a.label, b.label)
        rows.append(
            [
                "trained tokens / s",
                num(a.trained_tokens_per_s, 1),
                num(b.trained_tokens_per_s, 1),
                _ratio_text(a.trained_tokens_per_s, b.trained_tokens_per_s, names, "faster", True),
            ]
        )
        ca, cb = costs[0], costs[1]
        pa, pb = (ca.usd_per_m_trained if ca else None), (cb.usd_per_m_trained if cb else None)
        rows.append(["training $ / 1M trained tokens", usd(pa), usd(pb), _ratio_text(pa, pb, names, "cheaper", False)])
        rows.append(
            [
                "final loss",
                num(a.final_loss, 4),
                num(b.final_loss, 4),
                "not comparable (see flags)"
                if notes and any(n.level == "error" for n in notes)
                else "same loss definition",
            ]
        )
        if any(n.level == "error" for n in notes):
            flagged.add(len(rows) - 1)
        items.append(Table("Training", ["figure", a.label, b.label, "comparison"], rows, flagged))
        rows = []
    if len(inputs.sweeps) >= 2:
        sa, sb = inputs.sweeps[:2]
        sweep_errors = [n for n in compare_sweeps(inputs.sweeps) if n.level == "error"]
        items += sweep_errors
        for context in sorted(set(sa.contexts) & set(sb.contexts)):
            conc = common_concurrency(sa, sb, context)
            if conc is None:
                continue
            ta = next(c for c in sa.at(context) if c.concurrency == conc).latency(TTFT)
            tb = next(c for c in sb.at(context) if c.concurrency == conc).latency(TTFT)
            rows.append(
                [
                    f"median TTFT, ctx {context}, {conc} concurrent (ms)",
                    num(ta),
                    num(tb),
                    _ratio_text(ta, tb, (sa.label, sb.label), "lower", False),
                ]
            )
        for context in sorted(set(sa.contexts) & set(sb.contexts)):
            pa = next((c.usd_per_m_output for c in serving[0] or [] if c.context_len == context), None)
            pb = next((c.usd_per_m_output for c in serving[1] or [] if c.context_len == context), None)
            if pa is not None or pb is not None:
                rows.append(
                    [
                        f"serving $ / 1M output tokens, ctx {context}",
                        usd(pa),
                        usd(pb),
                        _ratio_text(pa, pb, (sa.label, sb.label), "cheaper", False),
                    ]
                )
        caption = "TTFT at the highest concurrency both measured at or below both knees (before queueing)."
        flagged = set(range(len(rows))) if sweep_errors else set()
        items.append(Table("Serving", ["figure", sa.label, sb.label, "comparison"], rows, flagged, caption))
    if inputs.evals:
        items += [n for n in compare_evals(inputs.evals) if n.level == "error"]
        mismatched = {e.name for x, y, _ in unmatched(inputs.evals) for e in (x, y)}
        everything = not_comparable(inputs.evals)
        for group in eval_groups(inputs.evals):
            table = pass_at_k_table(group, f"pass@k — {group.title}")
            table.flagged = {i for i, e in enumerate(group.evals) if everything or e.name in mismatched}
            items.append(table)
    return items


def _seed_section(doc: Document, book: PriceBook) -> None:
    """The seed's published figures recomputed by this cost model (catalog prices; every input an assumption)."""
    section = doc.section("The seed's figures, recomputed (assumptions, not measurements)")
    tpu, gpu = seed_options(book=book)
    per_token = tpu.serve.usd_per_m_output / gpu.serve.usd_per_m_output
    bill = gpu_serving_bill_for_ratio(SEED_TCO_RATIO, book)
    rows = [
        ["training, TPU v5p-8", f"3.34 h × {usd(tpu.train.price.per_hour)}/h", usd(tpu.train.step_cost)],
        ["training, 2×H100", f"5.39 h × {usd(gpu.train.price.per_hour)}/h", usd(gpu.train.step_cost)],
        ["training cost ratio", "GPU / TPU", f"{gpu.train.step_cost / tpu.train.step_cost:.2f}×"],
        ["serving $/token at 4096, v6e-8 vs 2×H100", "TPU +66 % output throughput", f"TPU {1 - per_token:.0%} cheaper"],
        [
            "TCO, train once + 1 h of serving on each",
            "GPU total / TPU total",
            f"{tco_ratio(gpu, tpu, SEED_TCO_WORKLOAD):.2f}× (seed: {SEED_TCO_RATIO}×)",
        ],
        [
            "per-token serving instead",
            "GPU serving bill needed for 1.82×",
            f"{usd(bill)} ({bill / gpu.serve.price.per_hour:.1f} h of 2×H100)",
        ],
    ]
    section.items.append(
        Table(
            "Seed",
            ["figure", "inputs", "result"],
            rows,
            caption="Prices from the catalog (crosstune.hardware) unless --prices overrides them.",
        )
    )


def _prices_section(doc: Document, prices: list) -> None:
    rows = {
        (p.target, p.kind): [p.target, f"{usd(p.per_hour)}/h", p.kind.replace("_", "-"), p.source, p.date or "n/a"]
        for p in prices
    }
    doc.section("Prices used").items.append(
        Table(
            "Prices",
            ["target", "price (whole target)", "kind", "source", "as of"],
            list(rows.values()),
            caption="Override with --prices FILE (per chip or per target) or a recipe's cost.price_per_hour.",
        )
    )


def write_report(
    inputs: list[Path],
    out_dir: Path,
    *,
    book: PriceBook | None = None,
    slo: dict[str, float] | None = None,
    workload: Workload = DEFAULT_WORKLOAD,
    context: int | None = None,
    pairs: list[tuple[Path, Path]] | None = None,
) -> Path:
    """Write report.md (+ charts/*.png) and the self-contained report.html into `out_dir` (whole, or not at all;
    only an earlier report there is replaced); returns the HTML path."""
    out_dir = Path(out_dir).absolute()
    check_out(out_dir, list(inputs))  # before reading anything: a wrong --out costs nothing
    read = read_inputs(list(inputs))
    doc = build_report(read, book, slo, workload, context, pairs)
    with report_folder(out_dir, [*inputs, *read.paths]) as tmp:
        charts = tmp / "charts"
        charts.mkdir()
        for chart in doc.charts():
            (charts / f"{chart.name}.png").write_bytes(chart.png)
        (tmp / "report.md").write_text(to_markdown(doc), encoding="utf-8")
        (tmp / "report.html").write_text(to_html(doc), encoding="utf-8")
    return out_dir / "report.html"
