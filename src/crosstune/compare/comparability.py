"""What makes two runs (or two evals) comparable, and where each run records it.

Runs must share the data (prepared data hash), the chat template the data was rendered with (tokenizer hash,
which covers the template) and the loss convention. Each is read from run.json when the run records it, else from
the prepared data's manifest.json (found via run.json `prepared_dir`, the recipe's data.prepared_dir, or the
default layout <output_dir>/data/<recipe name> next to the run directory). What no input records is reported as
unchecked, never assumed equal.
"""

from __future__ import annotations

import json
from pathlib import Path

from crosstune.compare.document import Note
from crosstune.compare.runs import RunSummary

# (label, run.json keys in order of preference, manifest.json key)
RUN_KEYS = (
    ("data hash", ("data_hash",), "data_hash"),
    ("chat-template hash", ("chat_template_hash", "template_hash", "tokenizer_hash"), "tokenizer_hash"),
)


def prepared_manifest(run: RunSummary) -> dict:
    data = run.recipe.get("data") or {}
    default = run.path.resolve().parent / "data" / str(run.recipe.get("name") or run.meta.get("recipe_name"))
    for c in (run.meta.get("prepared_dir"), data.get("prepared_dir"), default):
        # a relative path in a stored recipe is relative to a recipe file that is no longer at hand
        if c and Path(c).is_absolute() and (Path(c) / "manifest.json").is_file():
            path = Path(c) / "manifest.json"
            return {**json.loads(path.read_text()), "_path": str(path)}
    return {}


def run_fingerprint(run: RunSummary) -> dict[str, str | None]:
    """label -> value (None: not recorded anywhere this reader looks)."""
    manifest = prepared_manifest(run)
    out: dict[str, str | None] = {}
    for label, meta_keys, manifest_key in RUN_KEYS:
        value = next((run.meta[k] for k in meta_keys if run.meta.get(k)), None) or manifest.get(manifest_key)
        out[label] = value
    out["loss convention"] = run.loss_convention
    return out


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
            shown = "; ".join(f"{r.label}: {_short(v)}" for r, v in zip(runs, values, strict=True))
            notes.append(Note(f"the runs differ in {label} — {shown}", "error"))
        elif unknown:
            notes.append(Note(f"{label} not recorded for {', '.join(unknown)}: comparability unchecked", "warn"))
    return notes


def compare_evals(evals: list[tuple[str, dict]]) -> list[Note]:
    """Evals are comparable on the same problems, task, verdict mode and samples per problem."""
    if len(evals) < 2:
        return []
    notes = []
    for key, get in (
        ("problem set", lambda s: tuple(sorted(p["problem"] for p in s.get("per_problem", [])))),
        ("verdict mode", lambda s: s.get("mode")),
        ("task", lambda s: s.get("task")),
        ("samples per problem", lambda s: tuple(sorted({p["n"] for p in s.get("per_problem", [])}))),
    ):
        values = [get(s) for _, s in evals]
        if len(set(values)) > 1:
            shown = "; ".join(f"{name}: {_short(v)}" for (name, _), v in zip(evals, values, strict=True))
            notes.append(Note(f"the evaluations differ in {key} — {shown}", "error"))
    return notes


def _short(value: object) -> str:
    text = str(value)
    if isinstance(value, tuple) and len(value) > 4:
        text = f"{len(value)} items ({', '.join(map(str, value[:3]))}, …)"
    return text[:12] + "…" if isinstance(value, str) and len(value) > 16 else text
