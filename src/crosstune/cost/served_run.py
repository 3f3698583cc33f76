"""Which run a serving sweep served, by what the sweep declares (its `source`, an export manifest's source: run_dir,
backend, recipe_hash, step): the one rule the report's pairing (crosstune.report.pairing) and a TCO
workload's options (crosstune.cost.tco_workload) both apply."""

from __future__ import annotations

from pathlib import Path

from crosstune.run.run_summary import RunSummary


def declared_run(source: dict | None) -> str | None:
    """How a sweep names the run it served, for messages (None: it names none)."""
    if not source:
        return None
    return str(source.get("run_dir") or source.get("run") or f"{source.get('backend')} run {source.get('recipe_hash')}")


def sweep_serves(source: dict | None, run: RunSummary) -> bool | None:
    """True: the sweep's source is this run; False: another run; None: the sweep declares none.
    The run directory decides when it still exists; a moved run is recognised by its recipe hash and backend."""
    if not source:
        return None
    named = source.get("run_dir") or source.get("run")
    if named and Path(named).exists():
        return Path(named).resolve() == run.path.resolve()
    recipe_hash, backend = source.get("recipe_hash"), source.get("backend")
    if recipe_hash and backend:
        return (recipe_hash, backend) == (run.record.recipe_hash, run.backend)
    return False if named else None
