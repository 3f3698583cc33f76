"""Prices per hardware target: the catalog (crosstune.hardware) plus user overrides, each with its source.

A prices YAML (`--prices FILE`) overrides per chip ($/chip-hour) or per whole target ($/hour):

    chips:
      tpu-v5p: {on_demand: 2.94, spot: 1.30, source: "1-year committed use, our contract", date: "2026-01"}
    targets:
      2xh100: {on_demand: 19.50, source: "other cloud, list price", date: "2026-02"}

A recipe's `cost.price_per_hour` overrides the price of that recipe's own `hardware` (whole target, on-demand).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from crosstune.bounds import number
from crosstune.errors import InputError
from crosstune.hardware import CHIPS, HARDWARE, get_hardware
from crosstune.recipe.schema import Recipe
from crosstune.untrusted_files import read_yaml


class CostError(InputError):
    """A cost that can't be computed from what was given; the message says what is missing and how to give it."""


PRICES_HELP = (
    "YAML of price overrides: chips: {tpu-v5p: {on_demand: 2.9, spot: …, source: …, date: …}} and/or targets: "
    "{2xh100: {on_demand: …}}."
)

PriceKind = Literal["on_demand", "spot"]
_ENTRY_KEYS = {"on_demand", "spot", "source", "date"}
# No accelerator rents for more (H100s list at ~$11/chip-hour): a larger figure is a typo or a price per month/year.
MAX_USD_PER_CHIP_HOUR = 1000.0

__all__ = ["CostError", "MAX_USD_PER_CHIP_HOUR", "Price", "PriceBook", "load_prices", "recipe_price_book"]


@dataclass(frozen=True)
class Price:
    target: str
    per_hour: float  # the whole target (all its chips)
    kind: PriceKind
    source: str
    date: str

    def __post_init__(self) -> None:
        number(f"price of {self.target} ({self.source})", self.per_hour, low=0, low_open=True, unit="$/hour")

    def short(self) -> str:
        return f"${self.per_hour:,.2f}/h {self.kind.replace('_', '-')}"

    def describe(self) -> str:
        when = f", {self.date}" if self.date else ""
        return f"{self.short()} for {self.target} ({self.source}{when})"


@dataclass
class PriceBook:
    """Resolves $/hour of a target: target override, else chip override × chips, else the catalog."""

    chips: dict[str, dict] = field(default_factory=dict)
    targets: dict[str, dict] = field(default_factory=dict)

    def price(self, target: str, kind: PriceKind = "on_demand") -> Price:
        try:
            hw = get_hardware(target)
        except KeyError as e:
            raise CostError(str(e.args[0])) from None
        if kind in self.targets.get(target, {}):
            entry = self.targets[target]
            return Price(target, float(entry[kind]), kind, entry.get("source", "override"), str(entry.get("date", "")))
        if kind in self.chips.get(hw.chip.name, {}):
            entry = self.chips[hw.chip.name]
            per_hour = float(entry[kind]) * hw.devices
            return Price(target, per_hour, kind, entry.get("source", "override"), str(entry.get("date", "")))
        per_hour = hw.price_per_hour if kind == "on_demand" else hw.spot_price_per_hour
        if per_hour is None:
            label = kind.replace("_", "-")
            raise CostError(
                f"no {label} price for {target} ({hw.devices} × {hw.chip.name}) in the catalog: give one with "
                f"--prices FILE (chips: {{{hw.chip.name}: {{{kind}: <$/chip-hour>, source: ..., date: ...}}}}) "
                "or the recipe's cost.price_per_hour"
            )
        if kind == "spot":
            return Price(target, per_hour, kind, hw.chip.spot_price_source, hw.chip.spot_price_date)
        return Price(target, per_hour, kind, hw.chip.price_source, hw.chip.price_date)

    def with_target_price(self, target: str, per_hour: float, source: str) -> PriceBook:
        """A copy where `target`'s on-demand price is `per_hour` (e.g. from a recipe's cost.price_per_hour)."""
        targets = {**self.targets, target: {**self.targets.get(target, {}), "on_demand": per_hour, "source": source}}
        return PriceBook(dict(self.chips), targets)


def load_prices(path: Path | None) -> PriceBook:
    """The catalog, with the overrides of a prices YAML when `path` is given (errors name the file and key)."""
    if path is None:
        return PriceBook()
    path = Path(path)
    if not path.is_file():
        raise CostError(f"{path}: no such prices file")
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict) or set(raw) - {"chips", "targets"}:
        raise CostError(f"{path}: expected top-level keys `chips` and/or `targets`, got {_shape(raw)}")
    return PriceBook(
        _section(path, raw.get("chips") or {}, "chips", CHIPS),
        _section(path, raw.get("targets") or {}, "targets", HARDWARE),
    )


def _shape(value: object) -> str:
    """What a YAML value is, for a message: a mapping's keys (of any type: sorting mixed keys raised a TypeError
    inside the message), else its type and value."""
    if isinstance(value, dict):
        return "keys " + ", ".join(repr(k) for k in value)
    return f"{type(value).__name__} {value!r}"[:200]


def _section(path: Path, section: object, name: str, known: dict) -> dict[str, dict]:
    if not isinstance(section, dict):
        raise CostError(f"{path}: `{name}` must be a mapping of names to price entries, not {_shape(section)}")
    out = {}
    for key, entry in section.items():
        where = f"{path}: {name}.{key}"
        if key not in known:
            raise CostError(f"{where}: unknown {name[:-1]}; known: {', '.join(known)}")
        if not isinstance(entry, dict) or not entry or set(entry) - _ENTRY_KEYS:
            raise CostError(f"{where}: expected a mapping with keys from {sorted(_ENTRY_KEYS)}")
        chips = 1 if name == "chips" else HARDWARE[key].devices
        for kind in ("on_demand", "spot"):
            if entry.get(kind) is not None:
                unit = "$/chip-hour" if name == "chips" else f"$/hour for all {chips} chips"
                number(
                    f"{where}.{kind}", entry[kind], low=0, low_open=True, high=MAX_USD_PER_CHIP_HOUR * chips, unit=unit
                )
        for text in ("source", "date"):
            if entry.get(text) is not None and not isinstance(entry[text], str):
                raise CostError(f"{where}.{text}: {entry[text]!r} is not text (quote it)")
        out[key] = {**entry, "source": str(entry.get("source") or f"{path.name}")}
    return out


def recipe_price_book(book: PriceBook, recipe: Recipe | None) -> PriceBook:
    """Apply a recipe's `cost.price_per_hour` (a run's recipe.yaml; None: the run has none) to its hardware."""
    if recipe is None or recipe.cost.price_per_hour is None:
        return book
    return book.with_target_price(recipe.hardware, recipe.cost.price_per_hour, "recipe cost.price_per_hour")
