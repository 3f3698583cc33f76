"""Training and serving cost from measured runs and sweeps, and what-if costs from assumed speeds.

Training: hours × $/h of the run's hardware target (the machine you rent, all its chips), and $ per 1M trained
(assistant) tokens — once over the steps alone, once with compilation and checkpoint saves when the run recorded
them. Serving: $/h ÷ output tokens per hour at the chosen operating point of the sweep (bench.py), per 1M output
tokens. What-if: the same arithmetic from an assumed tokens/s or MFU; every assumed figure is listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crosstune.bounds import number
from crosstune.cost.prices import CostError, Price, PriceBook, recipe_price_book
from crosstune.errors import InputError
from crosstune.hardware import get_hardware
from crosstune.run.run_summary import RunSummary
from crosstune.servebench.slo import check_slo, describe
from crosstune.servebench.summary_cells import Cell, Sweep, saturation_point, slo_point

M = 1e6


@dataclass
class TrainingCost:
    label: str
    price: Price
    step_hours: float
    trained_tokens: float
    wall_hours: float | None = None  # steps + compilation + checkpoint saves; None when not recorded
    assumptions: list[str] = field(default_factory=list)  # non-empty: a what-if, not a measurement
    notes: list[str] = field(default_factory=list)
    run: RunSummary | None = None  # the measured run (None for a what-if)

    @property
    def step_cost(self) -> float:
        return self.step_hours * self.price.per_hour

    @property
    def wall_cost(self) -> float | None:
        return None if self.wall_hours is None else self.wall_hours * self.price.per_hour

    @property
    def usd_per_m_trained(self) -> float | None:
        return self.step_cost / self.trained_tokens * M if self.trained_tokens else None

    @property
    def usd_per_m_trained_wall(self) -> float | None:
        cost = self.wall_cost
        return None if cost is None or not self.trained_tokens else cost / self.trained_tokens * M

    @property
    def is_assumption(self) -> bool:
        return bool(self.assumptions)


def training_cost(run: RunSummary, book: PriceBook, target: str | None = None) -> TrainingCost:
    """The measured run's cost on its own hardware (or `target`'s price, e.g. to price a run at another rate)."""
    target = target or run.hardware
    price = recipe_price_book(book, run.recipe).price(target)
    wall = run.wall_time_s
    return TrainingCost(
        label=run.label,
        price=price,
        step_hours=run.step_time_s / 3600,
        trained_tokens=run.trained_tokens,
        wall_hours=None if wall is None else wall / 3600,
        notes=list(run.notes),
        run=run,
    )


def tokens_per_s_at_mfu(target: str, mfu: float, flops_per_token: float) -> float:
    """Tokens/s a whole target reaches at `mfu` of its bf16 peak, for a model costing `flops_per_token` to train."""
    hw = get_hardware(target)
    if hw.peak_tflops is None:
        raise CostError(f"{target} has no bf16 peak in the catalog: MFU means nothing there; assume tokens/s instead")
    number("MFU", mfu, low=0, low_open=True, high=1, unit="a fraction of the bf16 peak")
    return mfu * hw.peak_tflops * 1e12 / flops_per_token


def what_if_training(
    book: PriceBook,
    target: str,
    *,
    trained_tokens: float,
    tokens_per_s: float | None = None,
    hours: float | None = None,
    label: str | None = None,
    assumptions: list[str] | None = None,
) -> TrainingCost:
    """A training cost without a measured run: from assumed hours, or tokens ÷ assumed tokens/s."""
    made = list(assumptions or [])
    trained_tokens = number("trained tokens", trained_tokens, low=0, low_open=True)
    if hours is None:
        if tokens_per_s is None:
            raise CostError("a what-if training cost needs hours or a positive tokens/s")
        tokens_per_s = number("trained tokens/s", tokens_per_s, low=0, low_open=True)
        hours = trained_tokens / tokens_per_s / 3600
        made.append(f"{tokens_per_s:,.0f} trained tokens/s on {target}")
    else:
        hours = number("training hours", hours, low=0, low_open=True)
        made.append(f"{hours:g} h on {target}")
    made.append(f"{trained_tokens / M:,.2f} M trained tokens")
    return TrainingCost(label or f"what-if · {target}", book.price(target), hours, trained_tokens, hours, made)


@dataclass
class ServingCost:
    sweep: str
    context_len: int
    policy: str  # "saturation" or "SLO p99_ttft_ms <= 2,000, ..."
    price: Price | None
    cell: Cell | None = None
    error: str | None = None  # why there is no operating point (e.g. no load meets the SLO)
    assumptions: list[str] = field(default_factory=list)
    source: dict | None = None  # the run the sweep declares it served (Sweep.source)

    @property
    def usd_per_m_output(self) -> float | None:
        if self.cell is None or self.price is None or self.cell.output_throughput <= 0:
            return None
        return self.price.per_hour / (self.cell.output_throughput * 3600) * M


def serving_costs(
    sweep: Sweep, book: PriceBook, target: str | None = None, slo: dict[str, float] | None = None
) -> list[ServingCost]:
    """$ per 1M output tokens per context length, at saturation or at the highest load meeting `slo`."""
    target = target or sweep.target
    if target is None:
        raise CostError(f"{sweep.path}: the summary names no `target`: pass --target (e.g. 2xh100, tpu-v6e-8)")
    price = book.price(target)
    slo = check_slo(slo) if slo else None
    policy = f"SLO {describe(slo)}" if slo else "saturation"
    out = []
    for context in sweep.contexts:
        try:
            cell = slo_point(sweep, context, slo) if slo else saturation_point(sweep, context)
            out.append(ServingCost(sweep.label, context, policy, price, cell, source=sweep.source))
        except InputError as e:
            out.append(ServingCost(sweep.label, context, policy, price, error=str(e), source=sweep.source))
    return out


def what_if_serving(book: PriceBook, target: str, context_len: int, output_tokens_per_s: float) -> ServingCost:
    """Serving cost from an assumed output throughput (marked as an assumption)."""
    number("an assumed output throughput", output_tokens_per_s, low=0, low_open=True, unit="output tokens/s")
    # an assumption, not a measured cell: no sweep's figures to check (the throughput was, above; the context may be 0)
    cell = Cell.model_construct(
        context_len=context_len, concurrency=0, completed=0, output_throughput=output_tokens_per_s
    )
    made = [f"{output_tokens_per_s:,.0f} output tokens/s on {target} at context {context_len}"]
    return ServingCost(f"what-if · {target}", context_len, "assumed", book.price(target), cell, assumptions=made)
