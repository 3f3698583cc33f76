"""What `--resume` may change (both backends): a resumed run must continue what was trained, so a recipe that
changes the model, LoRA, data or optimisation is refused, key by key; length, cadence and locations may change."""

from __future__ import annotations

from pathlib import Path

from crosstune.errors import CrosstuneError, InputError
from crosstune.recipe import Recipe
from crosstune.recipe.schema import BACKEND_NAMES
from crosstune.run.layout import RECIPE_YAML, RUN_JSON, is_run_dir, read_run_recipe
from crosstune.run.records import read_run_record

# YAML path (or section prefix) -> why changing it on --resume is safe
SAFE_CHANGES = {
    "train.max_steps": "the run length: training continues from the checkpoint to the new end",
    "train.epochs": "the run length: training continues from the checkpoint to the new end",
    "train.log_every": "how often metrics are logged",
    "train.checkpoint_every": "how often checkpoints are written",
    "train.keep_last": "how many checkpoints are kept",
    "name": "a label",
    "description": "a label",
    "output_dir": "where outputs go (the run directory is given)",
    "data.prepared_dir": "where prepared data lives (its contents are checked by hash when loaded)",
    "data.strict": "how bad records are handled when preparing (the prepared data is checked by hash)",
    "backend.default": "the backend is the run's (checked separately)",
    "serve": "not used by training",
    "eval": "not used by training",
    "cost": "not used by training",
}
LENGTH_KEYS = ("train.max_steps", "train.epochs")


class ResumeError(CrosstuneError):
    """--resume can't continue this run as asked."""


def flatten(value: object, prefix: str = "") -> dict[str, object]:
    """{YAML path: leaf value}; list items as path[i]."""
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def _safe_reason(key: str, backend: str) -> str | None:
    for other in (f"backend.{name}" for name in BACKEND_NAMES if name != backend):
        if key == other or key.startswith(other + "."):
            return f"settings of the other backend ({backend} run)"
    for safe, why in SAFE_CHANGES.items():
        if key == safe or key.startswith(safe + ".") or key.startswith(safe + "["):
            return why
    return None


def check_resume(run_dir: Path, recipe: Recipe, backend: str) -> list[str]:
    """Notes on what the resumed recipe changes safely; ResumeError listing every key (YAML path, old → new) that
    would change what was trained, or a backend that is not the run's."""
    run_dir = Path(run_dir)
    recipe_path = run_dir / RECIPE_YAML
    if not is_run_dir(run_dir) or not recipe_path.is_file():
        return []  # nothing was trained yet (the backend starts from step 0 and says so)
    try:
        record, before = read_run_record(run_dir), read_run_recipe(run_dir)
    except InputError as e:
        raise ResumeError(f"{e} (resume needs the run's {RUN_JSON} and {RECIPE_YAML} intact)") from None
    if record.backend != backend:
        raise ResumeError(
            f"{run_dir} was trained by the {record.backend} backend: resume it with --backend {record.backend}"
        )
    old = flatten(before.model_dump(mode="json") if before is not None else {})
    new = flatten(recipe.model_dump(mode="json"))
    changed = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    refused = [k for k in changed if _safe_reason(k, backend) is None]
    if refused:
        lines = "\n".join(f"  {k}: {old.get(k)!r} → {new.get(k)!r}" for k in refused)
        raise ResumeError(
            f"--resume: the recipe changes what {run_dir} was trained with:\n{lines}\n"
            f"Resume with the run's own recipe ({recipe_path}), or start a new run in another --run-dir."
        )
    finished, planned = record.steps, recipe.train.max_steps
    if finished and planned and planned <= finished:  # known before any model is loaded (epochs: the backend checks)
        raise nothing_to_resume(run_dir, int(finished), planned)
    notes = [f"[resume] {k}: {old.get(k)!r} → {new.get(k)!r} (safe: {_safe_reason(k, backend)})" for k in changed]
    if any(k in LENGTH_KEYS for k in changed) and recipe.train.schedule != "constant":
        notes.append(
            f"[resume] the {recipe.train.schedule} learning-rate schedule is recomputed for the new length: the "
            "steps already trained followed the old one"
        )
    return notes


def nothing_to_resume(run_dir: Path, done: int, total: int) -> ResumeError:
    """The error for a --resume whose checkpoint is already at (or past) the recipe's last step."""
    return ResumeError(
        f"{run_dir} is already at step {done} of {total}: nothing to resume (raise train.max_steps or "
        "train.epochs to train further)"
    )
