"""What every stage of a study reads: the bundle, the recipe pointed into it, the backend, launch options, and the
manifest's record of the stages before (their outputs' hashes are the next stages' inputs). Files outside the
bundle that a stage reads (the model, the problems) enter its inputs by fingerprint, never by path."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from crosstune.fsutil import files_fingerprint
from crosstune.recipe import Recipe, load_recipe, model_path, model_snapshot, resolve_path
from crosstune.run.bucket import BucketCopy
from crosstune.study.bundle import Output, StudyError
from crosstune.study.bundle_schema import BundleManifest, OutputRecord

DATA, PLAN, EXPORT, SERVE, BENCH, EVAL, COST = "data", "plan", "export", "serve", "bench", "eval", "cost"
BASE, PARITY, RUNS = "base", "parity", "runs"
FINETUNE = "finetune"  # the evaluation of the bundle's fine-tune: eval/finetune/ (of the base: eval/base/)
# The stages a study runs only when asked (`--with`): the demo's, never a user's study on a TPU by accident.
OPTIONAL_STAGES = {
    "pretrain": "train crosstune's small Gemma 4 base on CPU (`crosstune pretrain`: shipped or cached) into BASE/base "
    "and fine-tune that (model.path is pointed there)",
    "parity": "both backends on one training step of the recipe (`crosstune parity`), before training",
    "eval-base": "evaluate the base at model.path too (eval/base/), by the engine that evaluates the fine-tune",
}


def study_overrides(bundle: Path, with_: tuple[str, ...] = ()) -> list[str]:
    """Point the recipe's outputs into the bundle: the prepared data and the run directory live there (and, with
    the pretrain stage, the base it trains)."""
    base = [f"model.path={bundle / BASE}"] if "pretrain" in with_ else []
    return [f"output_dir={bundle / RUNS}", f"data.prepared_dir={bundle / DATA}", *base]


def run_rel(recipe: Recipe, backend: str) -> str:
    """The study's run directory, bundle-relative."""
    return f"{RUNS}/{recipe.name}-{backend}"


def load_study_recipe(
    recipe_file: Path, bundle: Path, overrides: list[str] | None = None, with_: tuple[str, ...] = ()
) -> Recipe:
    return load_recipe(recipe_file, [*(overrides or []), *study_overrides(bundle, with_)])


@dataclass
class StageResult:
    """What a stage did: 'done' or 'skipped' (with why), its one-line note, its outputs (hashed into the manifest)
    and what the report reads from the bundle (contents: runs / evals / sweeps, relative paths)."""

    note: str
    outputs: list[Output] = field(default_factory=list)
    status: str = "done"
    record: dict[str, Any] = field(default_factory=dict)  # extra facts for the manifest (engine, command, ...)
    contents: dict[str, list[str]] = field(default_factory=dict)
    lead: bool = True  # False: a worker process of a multi-process run, which records nothing


@dataclass
class StudyContext:
    bundle: Path
    recipe: Recipe
    backend: str
    console: Console
    manifest: BundleManifest
    launch: dict[str, Any] = field(default_factory=dict)  # torch several-node options: node_rank, main_address
    prices: Path | None = None
    server: Any = None  # crosstune.study.serving.Server, shared by serve, bench and eval

    bucket: BucketCopy | None = None  # the bundle's copy in a bucket (crosstune.study.recovery)
    with_: tuple[str, ...] = ()  # the optional stages asked for (OPTIONAL_STAGES)
    recipe_file: Path | None = None  # what the recipe was loaded from, with `overrides` (the parity check reloads it)
    overrides: tuple[str, ...] = ()
    pretrain_steps: int | None = None  # the pretrain stage's steps (None: PretrainConfig's) and cache folder
    pretrain_cache: Path | None = None

    @property
    def run_rel(self) -> str:
        return run_rel(self.recipe, self.backend)

    @property
    def run_dir(self) -> Path:
        return self.bundle / self.run_rel

    @property
    def merged_dir(self) -> Path:
        return self.bundle / EXPORT / "merged"

    @property
    def adapter_dir(self) -> Path:
        return self.bundle / EXPORT / "adapter"

    def path(self, value: str | None) -> Path | None:
        return resolve_path(self.recipe, value)

    def section(self, *names: str) -> dict[str, Any]:
        """The recipe's sections `names` as JSON (a stage's recipe inputs), less where the bundle, the model and the
        problems are: a stage that reads those has their fingerprints among its inputs (`files`), so a bundle or a
        model copied to another machine or folder keeps its stages up to date, and new files at the same path don't."""
        dumped = self.recipe.model_dump(mode="json")
        dumped["data"].pop("prepared_dir", None)
        dumped["model"].pop("path", None)
        dumped["eval"].pop("problems", None)
        return {name: dumped[name] for name in names}

    def existing(self, path: Path | None, what: str) -> Path | None:
        """`path` (None when the recipe names none); a missing one is an error before anything is cleared: a bundle
        copied to a machine without the base model must not lose its run to "inputs changed"."""
        if path is not None and not path.exists():
            raise StudyError(
                f"{what} {path}: no such file or folder, and a stage's inputs include it: fix the recipe "
                "(or --set), or leave out the stages that read it (--from / --only)"
            )
        return path

    def check_recipe_paths(self, stages: list[str], recipe_file: Path) -> None:
        """Before the bundle is claimed: every file or folder outside it that a chosen stage reads exists (a study
        that lacked its eval problems stopped at eval, after the training), else one line naming the recipe key and
        what to do. In pipeline order: the model, the data sources, the eval problems."""
        from crosstune.data import DataError
        from crosstune.data.sources import source_files

        todo = f"make it first (the head of {recipe_file} says how) or give another with --set"
        model = next((st for st in ("prepare", "parity", "train", "export", "eval-base") if st in stages), None)
        made = "pretrain" in stages  # the study makes the base itself
        if model is not None and not made and (path := self.model_path) is not None and not path.exists():
            raise StudyError(
                f"model.path {path}: no such file or folder, and stage {model} reads it: {todo} model.path=PATH"
            )
        for i in range(len(self.recipe.data.sources) if "prepare" in stages else 0):
            try:
                source_files(self.recipe, i)
            except DataError as e:
                raise StudyError(f"{e}; stage prepare reads it: {todo} data.sources") from None
        evals = next((st for st in ("eval", "eval-base") if st in stages), None)
        if evals and (path := self.path(self.recipe.eval.problems)) is not None and not path.exists():
            raise StudyError(
                f"eval.problems {path}: no such file or folder, and stage {evals} reads it: {todo} eval.problems=PATH"
            )

    def files(self, path: Path | None, what: str) -> dict[str, str] | None:
        """The fingerprint of the file or folder at `path` (fsutil.files_fingerprint); see `existing`."""
        path = self.existing(path, what)
        return None if path is None else files_fingerprint(path)

    @property
    def model_path(self) -> Path | None:
        return model_path(self.recipe)  # a hub id: its snapshot in the hub cache (crosstune.hub)

    def model_revision(self) -> dict[str, str]:
        """{"model_revision": commit} when model.path is a hub id, else {} (a local model's inputs stay as they were):
        the commit a stage's inputs record beside the model's file fingerprints."""
        snapshot = model_snapshot(self.recipe)
        return {} if snapshot is None else {"model_revision": snapshot.commit}

    def outputs_of(self, stage: str) -> list[OutputRecord]:
        """The outputs a finished earlier stage recorded (its hashes feed this stage's inputs)."""
        entry = self.manifest.stages.get(stage)
        if entry is None or not entry.finished:
            state = "never ran" if entry is None else f"is {entry.status}"
            why = f" ({entry.stale})" if entry is not None and entry.stale else ""
            raise StudyError(
                f"stage {stage} {state} in {self.bundle}{why}: run it first (drop --from/--only, or include {stage})"
            )
        return entry.outputs or []
