"""Which sweep served which run: TCO options pair a run with a sweep by what the inputs declare (the sweep's
`source`, an export manifest's source: run_dir, backend, recipe_hash, step) or by the user's `--pair RUN=SUMMARY`,
never by their order on the command line (which once priced the torch run with the jax adapter's sweep)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from crosstune.cost.served_run import declared_run, sweep_serves
from crosstune.report.document import Note
from crosstune.report.inputs import ReportError
from crosstune.run.run_summary import RunSummary
from crosstune.servebench.summary import summary_file
from crosstune.servebench.summary_cells import Sweep

PAIR_HINT = "pair them with --pair RUN_DIR=SUMMARY (`bench serve` records `source` when it serves an export)"


@dataclass
class Pairing:
    pairs: list[tuple[int, int]] = field(default_factory=list)  # (run index, sweep index)
    notes: list[Note] = field(default_factory=list)


def pair_runs_with_sweeps(
    runs: list[RunSummary], sweeps: list[Sweep], explicit: list[tuple[Path, Path]] | None = None
) -> Pairing:
    """Pairs from `explicit` (run dir, summary path) first, then from each sweep's declared source; notes for what
    stays unpaired and why. A pair the sweep's own declaration contradicts is refused."""
    out = Pairing()
    by_run = {r.path.resolve(): i for i, r in enumerate(runs)}
    by_sweep = {s.path.resolve(): j for j, s in enumerate(sweeps)}
    for run_path, sweep_path in explicit or []:
        i = by_run.get(Path(run_path).resolve())
        found = summary_file(sweep_path)
        j = by_sweep.get(found.resolve())
        if i is None or j is None:
            missing = run_path if i is None else sweep_path
            raise ReportError(f"--pair {run_path}={sweep_path}: {missing} is not one of the report's inputs")
        if sweep_serves(sweeps[j].source, runs[i]) is False:
            raise ReportError(
                f"--pair {run_path}={sweep_path}: the sweep declares it served {declared_run(sweeps[j].source)}, "
                f"not {runs[i].path}"
            )
        out.pairs.append((i, j))
    paired_sweeps = {j for _, j in out.pairs}
    for j, sweep in enumerate(sweeps):
        if j in paired_sweeps:
            continue
        served = [i for i, run in enumerate(runs) if sweep_serves(sweep.source, run)]
        if len(served) == 1:
            out.pairs.append((served[0], j))
        elif served:
            names = ", ".join(runs[i].label for i in served)
            out.notes.append(Note(f"{sweep.label}: its source matches several runs ({names}): {PAIR_HINT}", "warn"))
        elif sweep.source:
            out.notes.append(
                Note(f"{sweep.label} served {declared_run(sweep.source)}, which is not among the runs given", "warn")
            )
        else:
            out.notes.append(Note(f"{sweep.label} does not say which run it served: {PAIR_HINT}", "warn"))
    paired_runs = {i for i, _ in out.pairs}
    for i, run in enumerate(runs):
        if i not in paired_runs:
            out.notes.append(Note(f"{run.label}: no sweep of what it trained is among the inputs", "warn"))
    out.pairs.sort()
    return out
