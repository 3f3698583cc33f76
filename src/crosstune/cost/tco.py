"""Total cost of a workload: train once, then serve for D days — per option (train and serve targets may differ).

Serving is billed one of two ways, both stated in the output:
  - per token: T output tokens/day at the option's operating point = T ÷ (tokens/s × 3600) hours × $/h, i.e. you
    pay for the hours the tokens need (an autoscaled or shared deployment);
  - per deployment hour: the endpoint is up H hours/day whatever it serves (a dedicated deployment).
The break-even point between two options is the day their totals cross: the option that is cheaper to train
stays cheaper until then if it is dearer to serve.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crosstune.bounds import MAX_DAYS, number
from crosstune.cost.costs import M, ServingCost, TrainingCost
from crosstune.cost.prices import CostError

HORIZON_YEARS = 10  # a break-even later than this is reported as "not within 10 years", not as a day number


@dataclass(frozen=True)
class Workload:
    days: float
    serve_tokens_per_day: float | None = None  # per-token billing
    serve_hours_per_day: float | None = None  # deployment-hour billing
    where: str = field(default="", compare=False)  # where the figures came from, for errors (a file, or options)

    def __post_init__(self) -> None:
        at = f"{self.where}: " if self.where else ""
        if (self.serve_tokens_per_day is None) == (self.serve_hours_per_day is None):
            raise CostError(f"{at}a workload serves either tokens per day or deployment hours per day (exactly one)")
        number(f"{at}days", self.days, low=0, unit="days of serving")
        if self.serve_tokens_per_day is not None:
            number(f"{at}serve_tokens_per_day", self.serve_tokens_per_day, low=0, unit="output tokens per day")
        if self.serve_hours_per_day is not None:
            number(f"{at}serve_hours_per_day", self.serve_hours_per_day, low=0, high=24, unit="hours a day")

    @classmethod
    def given(cls, where: str, days: object, tokens_per_day: object = None, hours_per_day: object = None) -> Workload:
        """A workload from a user's figures (a file, command-line options): numbers, and at most ten years."""
        at = f"{where}: " if where else ""
        number(f"{at}days", days, low=0, high=MAX_DAYS, unit="days of serving, at most ten years")
        for name, value in (("serve_tokens_per_day", tokens_per_day), ("serve_hours_per_day", hours_per_day)):
            if value is not None:
                number(f"{at}{name}", value)
        return cls(
            float(days),  # type: ignore[arg-type]
            None if tokens_per_day is None else float(tokens_per_day),  # type: ignore[arg-type]
            None if hours_per_day is None else float(hours_per_day),  # type: ignore[arg-type]
            where,
        )

    def describe(self) -> str:
        if self.serve_hours_per_day is not None:
            return f"train once, then an endpoint up {self.serve_hours_per_day:g} h/day for {self.days:g} days"
        return f"train once, then serve {self.serve_tokens_per_day / M:,.1f} M output tokens/day for {self.days:g} days"


@dataclass
class Option:
    name: str
    train: TrainingCost
    serve: ServingCost

    @property
    def train_usd(self) -> float:
        """With compilation and checkpoint saves where the run recorded them, else the steps alone."""
        wall = self.train.wall_cost
        return self.train.step_cost if wall is None else wall

    def serve_usd_per_day(self, workload: Workload) -> float:
        if self.serve.price is None:
            raise CostError(f"option {self.name}: its serving target has no price")
        if workload.serve_hours_per_day is not None:
            return workload.serve_hours_per_day * self.serve.price.per_hour
        per_m = self.serve.usd_per_m_output
        if per_m is None:
            raise CostError(
                f"option {self.name}: no serving operating point at context {self.serve.context_len}"
                + (f" ({self.serve.error})" if self.serve.error else "")
            )
        return workload.serve_tokens_per_day / M * per_m

    def total(self, workload: Workload, days: float | None = None) -> float:
        return self.train_usd + (workload.days if days is None else days) * self.serve_usd_per_day(workload)

    @property
    def assumptions(self) -> list[str]:
        return self.train.assumptions + self.serve.assumptions


@dataclass(frozen=True)
class BreakEven:
    days: float | None  # None: the totals never cross for days >= 0
    message: str


def break_even(a: Option, b: Option, workload: Workload) -> BreakEven:
    """The day the two options' totals cross (train_a + d·serve_a = train_b + d·serve_b)."""
    da, db = a.serve_usd_per_day(workload), b.serve_usd_per_day(workload)
    ta, tb = a.train_usd, b.train_usd
    if da == db:
        if ta == tb:
            return BreakEven(None, f"{a.name} and {b.name} cost the same on every day")
        cheap = a.name if ta < tb else b.name
        return BreakEven(None, f"{cheap} is cheaper on every day (same serving cost per day)")
    days = (tb - ta) / (da - db)
    if days <= 0:
        cheap = a.name if da < db else b.name
        return BreakEven(None, f"{cheap} is cheaper on every day (cheaper or equal to train, cheaper to serve)")
    cheap_first = a.name if ta < tb else b.name
    cheap_later = b.name if cheap_first == a.name else a.name
    if days > HORIZON_YEARS * 365.25:
        return BreakEven(
            None,
            f"{cheap_first} is cheaper for the next {HORIZON_YEARS} years: the totals cross only after "
            f"{days / 365.25:,.0f} years (serving costs ${abs(da - db):.2g} a day less on {cheap_later})",
        )
    return BreakEven(days, f"{cheap_first} is cheaper until day {days:,.1f}, {cheap_later} after")


def tco_ratio(a: Option, b: Option, workload: Workload) -> float:
    """How many times a's total is b's total."""
    return a.total(workload) / b.total(workload)
