"""Numbers entering cost and report (prices, sweeps, workloads, command-line options) are checked where they enter:
the right type (a JSON/YAML number, never a string or a boolean), finite, and in range — otherwise a InputError
naming the file and field. A NaN price printed `$nan/h`; an infinite throughput priced serving at $0.00."""

from __future__ import annotations

import math

from crosstune.errors import InputError


def number(
    where: str,
    value: object,
    *,
    low: float | None = None,
    low_open: bool = False,
    high: float | None = None,
    unit: str = "",
) -> float:
    """`value` as a float if it is a finite number within [low, high] (low excluded with `low_open`)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where}: {value!r} is not a number{_range(low, low_open, high, unit)}")
    if not math.isfinite(value):
        raise InputError(f"{where}: {value!r} is not a finite number{_range(low, low_open, high, unit)}")
    if (low is not None and (value < low or (low_open and value == low))) or (high is not None and value > high):
        raise InputError(f"{where}: {value!r} is not a number{_range(low, low_open, high, unit)}")
    return float(value)


def whole(where: str, value: object, *, low: int = 0, unit: str = "") -> int:
    """`value` if it is an int >= low (not a bool, not 2.0)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"{where}: {value!r} is not a whole number >= {low}{f' ({unit})' if unit else ''}")
    return value


def _range(low: float | None, low_open: bool, high: float | None, unit: str) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        parts.append(f"<= {high:g}")
    text = (" " + " and ".join(parts)) if parts else ""
    return text + (f" ({unit})" if unit else "")
