"""A measured run on spot / preemptible capacity next to on-demand, with the work a preemption loses as an explicit
term (a study with a bucket resumes from its last checkpoint: crosstune.study.recovery).

One preemption loses L = (steps since the last checkpoint) × step time + restart + compile:
- steps since the last checkpoint: train.checkpoint_every / 2 on average (a preemption falls anywhere between two
  checkpoints; checkpoint_every at worst), from the run's recipe.yaml;
- step time: the run's mean, compilation and checkpoint saves excluded (run.json / metrics.jsonl);
- compile: the run's compile_time_s (a new machine compiles the step again); 0 when the run recorded none;
- restart: a new machine, its setup and the bucket pull: an assumption (`restart_s`), stated with the result.
With preemptions at r per hour (an assumption, stated), each hour on spot does 1 − r·L hours of the run's work, so
the run takes T / (1 − r·L) hours there (T: the on-demand hours, steps + compilation + saves). Spot is the cheaper
while r < (1 − spot/on-demand) / L: the break-even rate, which needs no assumed rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crosstune.bounds import number
from crosstune.cost.prices import CostError, Price, PriceBook, recipe_price_book
from crosstune.errors import InputError
from crosstune.run.run_summary import RunSummary

RESTART_S = 600.0  # a new VM, its setup (the lock's wheels) and the bucket pull: ~10 min, an assumption
PREEMPTIONS_PER_HOUR = 0.1  # one preemption per 10 h: an assumption (no provider publishes a rate)


@dataclass
class SpotCost:
    label: str
    on_demand: Price
    spot: Price | None  # None: no spot price for the target (say so, don't guess)
    hours: float  # on-demand: steps + compilation + checkpoint saves (steps alone when those are not recorded)
    checkpoint_every: int
    step_s: float  # the mean optimizer step
    compile_s: float
    restart_s: float
    rate_per_hour: float
    assumptions: list[str] = field(default_factory=list)

    @property
    def lost_s(self) -> float:
        """Seconds of work one preemption costs, on average."""
        return self.checkpoint_every / 2 * self.step_s + self.restart_s + self.compile_s

    @property
    def lost_worst_s(self) -> float:
        """... when it comes just before a checkpoint."""
        return self.checkpoint_every * self.step_s + self.restart_s + self.compile_s

    @property
    def on_demand_cost(self) -> float:
        return self.hours * self.on_demand.per_hour

    @property
    def spot_hours(self) -> float | None:
        """The run's expected hours on spot at `rate_per_hour`; None when preemptions outpace the work."""
        useful = 1 - self.rate_per_hour * self.lost_s / 3600
        return self.hours / useful if useful > 0 else None

    @property
    def preemptions(self) -> float | None:
        return None if self.spot_hours is None else self.rate_per_hour * self.spot_hours

    @property
    def spot_cost(self) -> float | None:
        if self.spot is None or self.spot_hours is None:
            return None
        return self.spot_hours * self.spot.per_hour

    @property
    def lost_cost(self) -> float | None:
        """The part of spot_cost that pays for lost work (preemptions × L × the spot price)."""
        cost = self.spot_cost
        return None if cost is None else cost - self.hours * self.spot.per_hour  # type: ignore[union-attr]

    @property
    def break_even_per_hour(self) -> float | None:
        """The preemption rate at which spot costs what on-demand does; None without a spot price or when spot is
        not cheaper per hour."""
        if self.spot is None or self.spot.per_hour >= self.on_demand.per_hour:
            return None
        return (1 - self.spot.per_hour / self.on_demand.per_hour) / (self.lost_s / 3600)


def spot_cost(
    run: RunSummary,
    book: PriceBook,
    *,
    target: str | None = None,
    restart_s: float = RESTART_S,
    rate_per_hour: float = PREEMPTIONS_PER_HOUR,
) -> SpotCost:
    """The measured run on `target`'s (default: its own hardware's) spot capacity, beside on-demand."""
    target = target or run.hardware
    book = recipe_price_book(book, run.recipe)
    restart_s = number("restart seconds", restart_s, low=0, unit="s")
    rate_per_hour = number("preemptions per hour", rate_per_hour, low=0, unit="/h")
    if run.recipe is None:
        raise CostError(f"{run.path}/recipe.yaml: missing: the lost work of a preemption needs train.checkpoint_every")
    every = run.recipe.train.checkpoint_every
    try:
        spot = book.price(target, "spot")
    except InputError:
        spot = None
    wall = run.wall_time_s
    return SpotCost(
        label=run.label,
        on_demand=book.price(target),
        spot=spot,
        hours=(run.step_time_s if wall is None else wall) / 3600,
        checkpoint_every=every,
        step_s=run.step_time_s / run.steps,
        compile_s=run.compile_time_s or 0.0,
        restart_s=restart_s,
        rate_per_hour=rate_per_hour,
        assumptions=[
            f"restart {restart_s / 60:g} min (new machine, setup, bucket pull)",
            f"{rate_per_hour:g} preemptions/h",
        ],
    )
