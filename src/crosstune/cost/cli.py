"""`crosstune cost …`: training, serving, TCO and what-if costs — parsing and tables over crosstune.cost."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from crosstune.cost.prices import PRICES_HELP, CostError, load_prices

# Tables go whole into a pipe or a file (`cost serve … | tee costs.txt`): rich would cut them to 80 columns there.
# A terminal's width is read as usual, and COLUMNS, when set, still wins.
PIPE_WIDTH = 1000
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH)
cost_app = typer.Typer(
    help="What runs, serving and whole workloads cost, from measured runs and sweeps (or assumed "
    "speeds, marked as such). Prices: the catalog in crosstune.hardware, overridable.",
    no_args_is_help=True,
)
PRICES = typer.Option(None, "--prices", help=PRICES_HELP)


def register(app: typer.Typer) -> None:
    app.add_typer(cost_app, name="cost")


def _usd(x: float | None) -> str:
    return "n/a" if x is None else f"${x:,.2f}"


def _print_sources(prices: list) -> None:
    for p in {p.target: p for p in prices}.values():
        console.print(f"[dim]price: {p.describe()}[/dim]", highlight=False)


def _table(title: str, headers: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for h in headers:
        table.add_column(h, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


@cost_app.command("train")
def cost_train(
    runs: list[Path] = typer.Argument(..., help="Run directories (run.json + metrics.jsonl)."),
    prices: Path = PRICES,
    target: str = typer.Option(None, "--target", help="Price the runs as if on this hardware target."),
    restart_minutes: float = typer.Option(
        10.0, "--restart-minutes", help="Spot: minutes a preemption costs to restart (new machine, setup, pull)."
    ),
    preemptions_per_hour: float = typer.Option(
        0.1, "--preemptions-per-hour", help="Spot: the preemption rate assumed for the expected spot cost."
    ),
) -> None:
    """Training cost of runs: hours × $/h, and $ per 1M trained tokens, without and with compile/checkpoint time;
    then the same runs on spot capacity, with the work a preemption loses (steps since the last checkpoint +
    restart + compile) as its own term and the preemption rate at which spot stops paying."""
    from crosstune.cost.costs import training_cost
    from crosstune.cost.spot import spot_cost
    from crosstune.run.run_summary import read_run

    book, rows, used, spots = load_prices(prices), [], [], []
    for path in runs:
        run = read_run(path)
        spots.append(
            spot_cost(run, book, target=target, restart_s=restart_minutes * 60, rate_per_hour=preemptions_per_hour)
        )
        c = training_cost(run, book, target)
        used.append(c.price)
        rows.append(
            [
                c.label,
                c.price.short(),
                f"{c.step_hours:.4f}",
                _usd(c.step_cost),
                _usd(c.wall_cost),
                _usd(c.usd_per_m_trained),
                _usd(c.usd_per_m_trained_wall),
            ]
        )
        for note in c.notes:
            console.print(f"[yellow]{c.label}:[/yellow] {note}", highlight=False)
    console.print(
        _table(
            "Training cost",
            [
                "run",
                "price",
                "hours (steps)",
                "cost (steps)",
                "cost (+ compile, checkpoints)",
                "$/1M trained",
                "$/1M trained (+ compile, checkpoints)",
            ],
            rows,
        )
    )
    _print_sources(used)
    _print_spot(spots)


def _print_spot(spots: list) -> None:
    rows = []
    for s in spots:
        lost = (
            f"{s.lost_s / 60:,.1f} min (worst {s.lost_worst_s / 60:,.1f}): {s.checkpoint_every}/2 steps × "
            f"{s.step_s:,.2f} s + restart {s.restart_s / 60:g} min + compile {s.compile_s:,.0f} s"
        )
        if s.spot is None:
            rows.append(
                [
                    s.label,
                    _usd(s.on_demand_cost),
                    "no spot price (give --prices chips.CHIP.spot)",
                    lost,
                    "n/a",
                    "n/a",
                    "n/a",
                ]
            )
            continue
        even = s.break_even_per_hour
        rows.append(
            [
                s.label,
                _usd(s.on_demand_cost),
                s.spot.short(),
                lost,
                "n/a" if s.preemptions is None else f"{s.preemptions:,.2f} → {_usd(s.lost_cost)}",
                _usd(s.spot_cost) if s.spot_cost is not None else "never finishes (preempted faster than it works)",
                "never cheaper" if even is None else f"{even:,.2f}",
            ]
        )
    headers = ["run", "on-demand cost", "spot price", "lost per preemption", "preemptions → lost work",
               "spot cost (expected)", "break-even preemptions/h"]  # fmt: skip
    console.print(_table("Spot / preemptible capacity", headers, rows))
    if spots:
        console.print(f"[dim]assumed: {'; '.join(spots[0].assumptions)}[/dim]", highlight=False)
    for p in {s.spot.target: s.spot for s in spots if s.spot is not None}.values():
        console.print(f"[dim]price: {p.describe()}[/dim]", highlight=False)


@cost_app.command("serve")
def cost_serve(
    summaries: list[Path] = typer.Argument(..., help="Bench sweep summary JSONs (`crosstune bench serve`)."),
    prices: Path = PRICES,
    target: str = typer.Option(None, "--target", help="Hardware target to price at (default: the summary's)."),
    slo: list[str] = typer.Option(
        None,
        "--slo",
        help="Latency limit NAME=MS (repeatable), e.g. p99_ttft_ms=2000: "
        "cost at the highest load meeting all of them instead of at saturation.",
    ),
) -> None:
    """Serving cost per 1M output tokens per context length, at saturation or at the highest load meeting an SLO."""
    from crosstune.cost.costs import serving_costs
    from crosstune.servebench.slo import parse_slo
    from crosstune.servebench.summary_cells import read_sweep

    book, limits, rows, missed, used = load_prices(prices), parse_slo(slo), [], [], []
    for path in summaries:
        for c in serving_costs(read_sweep(path), book, target, limits or None):
            used += [c.price] if c.price else []
            conc = "n/a" if c.cell is None else str(c.cell.concurrency)
            rows.append(
                [
                    c.sweep,
                    str(c.context_len),
                    c.policy,
                    conc,
                    _usd(c.price.per_hour if c.price else None),
                    _usd(c.usd_per_m_output),
                ]
            )
            if c.error:
                missed.append(c.error)
    console.print(
        _table(
            "Serving cost", ["sweep", "context", "operating point", "concurrency", "$/h", "$/1M output tokens"], rows
        )
    )
    for message in missed:
        console.print(f"[yellow]{message}[/yellow]", highlight=False)
    _print_sources(used)


@cost_app.command("tco")
def cost_tco(
    workload_file: Path = typer.Argument(
        ...,
        help="Workload YAML: days, serve volume, options (see `crosstune.cost.tco_workload`); each option "
        "trains once and serves.",
    ),
    prices: Path = PRICES,
    days: float = typer.Option(None, "--days", help="Override the workload's days of serving."),
    tokens_per_day: float = typer.Option(None, "--tokens-per-day", help="Override: output tokens served per day."),
    hours_per_day: float = typer.Option(None, "--hours-per-day", help="Override: a dedicated endpoint up H h/day."),
) -> None:
    """Total cost: train once + serve for D days, per option, with the break-even day between the first two."""
    from crosstune.cost.tco import break_even
    from crosstune.cost.tco_workload import load_workload

    workload, options = load_workload(
        workload_file,
        load_prices(prices),
        days=days,
        serve_tokens_per_day=tokens_per_day,
        serve_hours_per_day=hours_per_day,
    )
    console.print(workload.describe())
    rows = [[o.name, _usd(o.train_usd), _usd(o.serve_usd_per_day(workload)), _usd(o.total(workload))] for o in options]
    console.print(_table("TCO", ["option", "training", "serving / day", "total"], rows))
    for o in options:
        for a in o.assumptions:
            console.print(f"[yellow]assumed[/yellow] ({o.name}): {a}", highlight=False)
    if len(options) >= 2:
        console.print(f"break-even: {break_even(options[0], options[1], workload).message}", highlight=False)


@cost_app.command("what-if")
def cost_what_if(
    target: str = typer.Option(..., "--target", help="Hardware target, e.g. tpu-v5p-8, 2xh100."),
    tokens: float = typer.Option(..., "--tokens", help="Trained tokens of the run (e.g. 9.2e6)."),
    tokens_per_s: float = typer.Option(None, "--tokens-per-s", help="Assumed trained tokens/s of the whole target."),
    mfu: float = typer.Option(None, "--mfu", help="Assumed MFU (0-1) instead of tokens/s; needs --model, --seq-len."),
    model: str = typer.Option(None, "--model", help="FAMILY/SIZE for the FLOP count, e.g. gemma4/31b."),
    seq_len: int = typer.Option(None, "--seq-len", help="Sequence length for the attention FLOPs."),
    recompute: bool = typer.Option(False, "--recompute", help="Activations recomputed (gradient checkpointing)."),
    prices: Path = PRICES,
) -> None:
    """Training cost without a run: from an assumed tokens/s or MFU. The output says what was assumed."""
    from crosstune.cost.tco_workload import train_cost_from_spec

    spec: dict = {"target": target, "tokens": tokens}
    if (tokens_per_s is None) == (mfu is None):
        raise CostError("give exactly one of --tokens-per-s and --mfu")
    spec |= (
        {"tokens_per_s": tokens_per_s}
        if mfu is None
        else {"mfu": mfu, "model": model, "seq_len": seq_len, "recompute": recompute}
    )
    c = train_cost_from_spec("what-if", Path.cwd(), spec, load_prices(prices))
    console.print(
        _table(
            "What-if training cost (assumptions, not a measurement)",
            ["target", "price", "hours", "cost", "$/1M trained"],
            [[target, c.price.short(), f"{c.step_hours:.2f}", _usd(c.step_cost), _usd(c.usd_per_m_trained)]],
        )
    )
    for a in c.assumptions:
        console.print(f"[yellow]assumed:[/yellow] {a}", highlight=False)
    _print_sources([c.price])
