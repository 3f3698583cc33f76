"""What makes two runs (or two serving sweeps: crosstune.servebench.sweep_comparison's rule) comparable, and where
each records it (evaluations: crosstune.report.eval_groups).

Runs must share the data (prepared data hash), the chat template the data was rendered with (tokenizer hash,
which covers the template) and the loss convention. The data hash and the loss convention are run.json's (its
`data.data_hash`, `loss_convention`); the tokenizer hash is the prepared data's manifest.json's (found via run.json
`data.prepared_dir`, the recipe's data.prepared_dir, or the default layout <output_dir>/data/<recipe name> next to
the run directory), as is the data hash of a run.json that has none. What no input records is reported as
unchecked, never assumed equal.
"""

from __future__ import annotations

from pathlib import Path

from crosstune.recipe.schema import SAFE_NAME
from crosstune.report.document import Note
from crosstune.run.run_summary import RunSummary
from crosstune.servebench import sweep_comparison
from crosstune.servebench.summary_cells import Sweep
from crosstune.servebench.sweep_comparison import short
from crosstune.untrusted_files import read_json


def prepared_manifest(run: RunSummary) -> dict:
    recipe = run.recipe
    name = recipe.name if recipe else run.record.recipe_name
    # the default layout <output_dir>/data/<name>, only for a name that is one path component (as recipes check)
    default = run.path.resolve().parent / "data" / name if SAFE_NAME.match(name) else None
    for c in (run.record.data.prepared_dir, recipe.data.prepared_dir if recipe else None, default):
        # a relative path in a stored recipe is relative to a recipe file that is no longer at hand
        if c and Path(c).is_absolute() and (Path(c) / "manifest.json").is_file():
            path = Path(c) / "manifest.json"
            manifest = read_json(path, "manifest.json is written by `crosstune data prepare`: prepare the data again")
            return {**manifest, "_path": str(path)} if isinstance(manifest, dict) else {}
    return {}


def run_fingerprint(run: RunSummary) -> dict[str, str | None]:
    """label -> value (None: not recorded anywhere this reader looks)."""
    manifest = prepared_manifest(run)
    return {
        "data hash": run.record.data.data_hash or manifest.get("data_hash"),
        "chat-template hash": manifest.get("tokenizer_hash"),
        "loss convention": run.loss_convention,
    }


def compare_runs(runs: list[RunSummary]) -> list[Note]:
    """Red notes for differing fingerprints, warnings for unrecorded ones; empty when all match."""
    if len(runs) < 2:
        return []
    prints = [run_fingerprint(r) for r in runs]
    notes = []
    for label in prints[0]:
        values = [p[label] for p in prints]
        unknown = [r.label for r, v in zip(runs, values, strict=True) if v is None]
        known = {v for v in values if v is not None}
        if len(known) > 1:
            shown = "; ".join(f"{r.label}: {short(v, 'hash' in label)}" for r, v in zip(runs, values, strict=True))
            notes.append(Note(f"the runs differ in {label} — {shown}", "error"))
        elif unknown:
            notes.append(Note(f"{label} not recorded for {', '.join(unknown)}: comparability unchecked", "warn"))
    return notes


def compare_sweeps(sweeps: list[Sweep]) -> list[Note]:
    """The sweeps' comparability as the report's notes: servebench's one rule, which `bench compare` applies too."""
    return [Note(f.text, f.level) for f in sweep_comparison.compare_sweeps(sweeps)]
