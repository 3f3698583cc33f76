"""What `crosstune plan --search` reports (crosstune.planner.search chooses): the frontier of compiled candidates no
other beats on both memory and speed, and the object `--json` prints."""

from __future__ import annotations

import dataclasses

from crosstune.hardware import HardwareTarget
from crosstune.planner.search import Result, Search
from crosstune.recipe import Recipe
from crosstune.units import GB


def pareto(results: list[Result]) -> list[Result]:
    """The compiled results no other beats on both memory per chip (Result.held_gb) and tokens/s."""
    done = [r for r in results if r.line is not None]
    return [
        r
        for r in done
        if not any(
            o is not r
            and o.held_gb <= r.held_gb
            and o.line.tokens_per_s >= r.line.tokens_per_s
            and (o.held_gb < r.held_gb or o.line.tokens_per_s > r.line.tokens_per_s)
            for o in done
        )
    ]


def search_json(search: Search, recipe: Recipe, hw: HardwareTarget) -> dict:
    """The object `crosstune plan --search --json` prints."""

    def one(r: Result) -> dict:
        line, step = r.line, r.step
        return {
            "candidate": dataclasses.asdict(r.candidate),
            "set": r.candidate.overrides(recipe),
            "stage": r.stage,
            "error": r.error or None,
            "planner_bytes_per_device": round(r.planner.total * GB),
            "xla_bytes_per_device": None if step is None else step.per_device_bytes,
            "xla_peak_bytes_per_device": None if step is None else step.peak_bytes or None,
            "fits": r.fits(hw.chip.usable_gb),
            "fits_by": None if step is None else step.held_by,  # XLA's "peak" or "total" (CompiledStep.held_bytes)
            "roofline": None if line is None else line.times(),
            "roofline_note": None if step is None else step.roofline_note,
            "predicted_micro_step_s": r.predicted_s,
            "predicted_tokens_per_s": r.tokens_per_s if r.predicted_s else None,
            "pareto": r in front,
            "compile_s": r.compile_s,
            "host_peak_rss_bytes": None if step is None else step.host_peak_rss_bytes,
        }

    compiled = [r for r in search.results if r.step is not None or r.stage == "failed"]
    front = pareto(search.results)
    return {
        "recipe": recipe.name,
        "hardware": hw.name,
        "depths": list(search.depths),
        "compiles": search.compiles,
        "winner": None if search.winner is None else one(search.winner),
        "baseline": None if search.baseline is None else one(search.baseline),
        "frontier": [one(r) for r in sorted(compiled, key=_rank)],
        "planned_only": len(search.results) - len(compiled),
        "notes": search.notes,
    }


def _rank(r: Result) -> tuple:
    return ({"final": 0, "screened": 1, "failed": 2}.get(r.stage, 3), -r.tokens_per_s)
