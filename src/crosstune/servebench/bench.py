"""The whole `bench serve` as one call, for the CLI, studies and the demo: the sweep written into a staged folder that
replaces only an earlier sweep, plots, and honest outcomes (an exception when nothing succeeded or on Ctrl-C).

    result = run_bench(SweepConfig(endpoint=..., model=..., tokenizer=..., contexts=[128, 512]), out=Path("b"))
    result.summary      # summary.json's content; result.problem: why it is no success (None: every cell ran and
                        # had a successful request), the one rule `bench serve`, a study and the demo apply

Ctrl-C ends it within a bounded time, whatever the load: asyncio.run cancels the sweep, which writes its finished
cells; nothing else follows — no plots, whose seconds of CPU a busy machine stretches tenfold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from crosstune.errors import Interrupted
from crosstune.servebench.sweep import BenchError, SweepConfig, empty_cells, run_sweep
from crosstune.servebench.sweep_folder import KeepPartial, default_out, staged_sweep


@dataclass(frozen=True)
class BenchResult:
    summary: dict
    out: Path
    empty_cells: list[str]  # one line per cell without a successful request, saying why

    @property
    def problem(self) -> str | None:
        """Why the sweep is not a success although it wrote a summary (None: every planned cell ran and each had a
        successful request): `bench serve` exits 1 with it, a study's bench stage and the demo fail with it."""
        if self.summary["aborted"]:
            return f"aborted: {self.summary['aborted']}"
        return "; ".join(self.empty_cells) or None


def run_bench(
    cfg: SweepConfig,
    out: Path | None = None,
    *,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
    plots: bool = True,
) -> BenchResult:
    """Run the sweep into `out` (default: a new runs/bench/<model>-<time> folder) and return what it measured.

    `out` appears whole: on success, on an aborted sweep (server gone) and on Ctrl-C (finished cells, the summary
    marked interrupted, no plots; then crosstune.errors.Interrupted is raised saying so). When no request of any cell
    succeeded, BenchError says why and `out` is left as it was. An existing `out` is replaced only with
    `overwrite` and only when it is an earlier sweep."""
    from crosstune.servebench.summary import load_summary, write_plots

    cfg.check()
    out = Path(out) if out is not None else default_out(cfg.model, cfg.label)
    with staged_sweep(out, overwrite=overwrite, inputs=[Path(cfg.tokenizer)]) as tmp:
        try:
            summary = asyncio.run(run_sweep(cfg, tmp, progress))
        except KeyboardInterrupt:
            path = tmp / "summary.json"
            summary = load_summary(path) if path.is_file() else {"cells": []}
            n = len(summary["cells"])
            if n == 0:
                raise Interrupted(
                    f"interrupted (Ctrl-C) before the first cell finished: nothing was written ({out} is as it was)"
                ) from None
            raise KeepPartial(
                Interrupted(
                    f"interrupted (Ctrl-C): the {n} finished cell(s) are kept in {out} (summary.json says "
                    "interrupted; the cell in progress was dropped; no plots were drawn); run the command again "
                    "with --overwrite to measure every cell"
                )
            ) from None
        if not any(c["completed"] for c in summary["cells"]):
            lines = empty_cells(summary)
            aborted = f"; {summary['aborted']}" if summary["aborted"] else ""
            raise BenchError(
                f"no request succeeded ({'; '.join(lines)}){aborted}: nothing was written ({out} is as it was)"
            )
        if plots:
            write_plots(summary, tmp)
    return BenchResult(summary, out, empty_cells(summary))
