"""The run directory's layout: the name of every file in it, and the one reader of recipe.yaml and the checkpoint
folders (run.json's schema and reader: crosstune.run.records; metrics.jsonl's: crosstune.run.metrics). Training,
export, cost and report all come through these, never through a backend's internals.

<run>/recipe.yaml     the resolved recipe            <run>/run.json         metadata (crosstune.run.records)
<run>/metrics.jsonl   per-step metrics (metrics.py)  <run>/tensorboard/     the same, for TensorBoard
<run>/checkpoints/    backend checkpoints by step    <run>/adapter/         PEFT adapter (final)
<run>/loss.png        the loss curve (plot.py)       <run>/.lock            held by the process training into it
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from crosstune.confinement import inside
from crosstune.errors import InputError
from crosstune.recipe.schema import RESOLVED, Recipe
from crosstune.untrusted_files import UnreadableFile, read_yaml

RUN_JSON = "run.json"
RECIPE_YAML = "recipe.yaml"
METRICS_JSONL = "metrics.jsonl"
TENSORBOARD = "tensorboard"
CHECKPOINTS = "checkpoints"
ADAPTER = "adapter"
LOSS_PNG = "loss.png"
XLA_CACHE = "xla-cache"  # jax's persistent compilation cache: a resumed run reuses its compiled step
LOCK = ".lock"  # flock'ed by the process that trains into the run (crosstune.fsutil.exclusive_lock)
TORCH_CHECKPOINT_PREFIX = "checkpoint-"  # torch: checkpoints/checkpoint-N; Orbax (jax): checkpoints/N


class RunDirError(InputError):
    """A folder given as a run directory isn't one, or lacks what was asked of it."""


_RESTORE = "restore it from a backup or train the run again"
_NO_LINK_FILE = "copy the file itself into the run directory, or remove the link"
_NO_LINK = "give --run-dir on the disk the checkpoints should live on instead of linking them there"


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def run_file(run_dir: Path, name: str) -> Path:
    """`run_dir/name`, refused (RunDirError naming it) when it is a link that leads out of the run directory: every
    reader of run.json, recipe.yaml and metrics.jsonl comes through here, so none reads (or quotes in an error) a
    file elsewhere."""
    inside(run_dir, name, label="the run directory", fix=_NO_LINK_FILE, error=RunDirError)
    return Path(run_dir) / name


def saved_lora(run_dir: Path, folder: Path) -> Path:
    """`folder` (the run's adapter/ or a checkpoint in it), refused (RunDirError naming it) when it or a file in it is
    a link that leads out of the run directory: an export reads what the run saved, never a file elsewhere."""
    inside(run_dir, folder, label="the run directory", fix=_NO_LINK_FILE, error=RunDirError)
    for entry in sorted(Path(folder).iterdir()) if Path(folder).is_dir() else ():
        inside(run_dir, entry, label="the run directory", fix=_NO_LINK_FILE, error=RunDirError)
    return Path(folder)


def is_run_dir(path: Path) -> bool:
    return (Path(path) / RUN_JSON).is_file()


def read_run_recipe(run_dir: Path) -> Recipe | None:
    """recipe.yaml as written by training, read into the recipe schema (None when the run has none): a value of the
    wrong type or out of range is an error naming the file and its YAML path. Its relative paths were relative to a
    recipe file that is no longer at hand: the recipe is not located (`Recipe.base_dir` None)."""
    path = run_file(run_dir, RECIPE_YAML)
    if not path.is_file():
        return None
    try:  # PyYAML's safe_dump wrote it: its safe loading is the exact inverse (a quoted "1e5" stays text, ...)
        recipe = read_yaml(path, dumped=True)
    except UnreadableFile as e:
        raise RunDirError(f"{e}; {_RESTORE}") from None
    if recipe is None:
        return None
    if not isinstance(recipe, dict):
        raise RunDirError(f"{path}: not a YAML mapping; {_RESTORE}")
    try:
        return Recipe.model_validate(recipe, context={RESOLVED: True})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "<root>"
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise RunDirError(f"{path}: {where}: {first['msg']}{more}; {_RESTORE}") from None


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint folder's name (torch's checkpoint-N, Orbax's N), None for any other name: N is ASCII
    digits ('²' and '٣' pass str.isdigit; int() refuses the first and reads the second as 3)."""
    digits = name.removeprefix(TORCH_CHECKPOINT_PREFIX)
    return int(digits) if digits.isascii() and digits.isdigit() else None


def step_folders(run_dir: Path) -> dict[int, Path]:
    """Complete checkpoints of either backend by step: torch's checkpoint-N, Orbax's N (both renamed into place
    whole; staging folders and Orbax's temp folders don't match). A link is not a checkpoint, and `checkpoints`
    that leads out of the run directory is refused (a resume and a pull delete step folders there)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return {}
    inside(run_dir, CHECKPOINTS, label="the run directory", fix=_NO_LINK, error=RunDirError)
    found = {}
    for p in root.iterdir():
        if (step := checkpoint_step(p.name)) is not None and p.is_dir() and not p.is_symlink():
            found[step] = p
    return dict(sorted(found.items()))


def saved_steps(run_dir: Path) -> list[int]:
    return list(step_folders(run_dir))
