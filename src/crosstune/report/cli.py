"""`crosstune report INPUT… --out DIR`: parsing over crosstune.report.write_report."""

from __future__ import annotations

from pathlib import Path

import typer

from crosstune.cost.prices import PRICES_HELP


def register(app: typer.Typer) -> None:
    app.command("report")(report)


def report(
    inputs: list[Path] = typer.Argument(
        ...,
        help="Run directories, eval output folders (summary.json) and bench "
        "sweep summaries, in the order to compare (the first two are the headline).",
    ),
    out: Path = typer.Option(..., "--out", help="Folder for report.md, report.html and charts/."),
    prices: Path = typer.Option(None, "--prices", help=PRICES_HELP),
    slo: list[str] = typer.Option(None, "--slo", help="Latency limit NAME=MS (repeatable): adds SLO serving costs."),
    days: float = typer.Option(30, "--days", help="TCO: days of serving."),
    tokens_per_day: float = typer.Option(10e6, "--tokens-per-day", help="TCO: output tokens served per day."),
    context: int = typer.Option(
        None,
        "--context",
        help="TCO: the sweep context to price serving at; every paired sweep must have measured it (default: the "
        "largest context they all measured).",
    ),
    pair: list[str] = typer.Option(
        None,
        "--pair",
        help="TCO: RUN_DIR=SUMMARY (repeatable): this sweep served what this run trained. Sweeps that record their "
        "`source` (an export's run) are paired by it; nothing is paired by position.",
    ),
) -> None:
    """Side-by-side report of runs, evals and serving sweeps: Markdown + one self-contained HTML page."""
    from crosstune.bounds import whole
    from crosstune.cost.prices import load_prices
    from crosstune.cost.tco import Workload
    from crosstune.report.inputs import parse_pairs
    from crosstune.report.writer import write_report
    from crosstune.servebench.slo import parse_slo

    book = load_prices(prices)
    if context is not None:
        whole("--context", context, low=1, unit="prompt tokens")
    pairs = parse_pairs(pair or [])
    html = write_report(
        inputs,
        out,
        book=book,
        slo=parse_slo(slo) or None,
        workload=Workload.given("--days / --tokens-per-day", days, tokens_per_day),
        context=context,
        pairs=pairs,
    )
    typer.echo(f"report: {html}  (Markdown: {html.with_name('report.md')})")
