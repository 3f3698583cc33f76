"""What every stage of a study reads: the bundle, the recipe pointed into it, the backend, launch options, and the
manifest's record of the stages before (their outputs' hashes are the next stages' inputs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from crosstune.recipe import Recipe, load_recipe, resolve_path
from crosstune.study.bundle import Output, StudyError

DATA, PLAN, EXPORT, SERVE, BENCH, EVAL, COST = "data", "plan", "export", "serve", "bench", "eval", "cost"
RUNS = "runs"
FINETUNE = "finetune"  # the evaluation of the bundle's fine-tune: eval/finetune/


def study_overrides(bundle: Path) -> list[str]:
    """Point the recipe's outputs into the bundle: the prepared data and the run directory live there."""
    return [f"output_dir={bundle / RUNS}", f"data.prepared_dir={bundle / DATA}"]


def load_study_recipe(recipe_file: Path, bundle: Path, overrides: list[str] | None = None) -> Recipe:
    return load_recipe(recipe_file, [*(overrides or []), *study_overrides(bundle)])


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
    manifest: dict[str, Any]
    launch: dict[str, Any] = field(default_factory=dict)  # torch several-node options: node_rank, main_address
    prices: Path | None = None
    server: Any = None  # crosstune.study.serving.Server, shared by serve, bench and eval

    @property
    def run_rel(self) -> str:
        return f"{RUNS}/{self.recipe.name}-{self.backend}"

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
        """The recipe's sections `names` as JSON (a stage's recipe inputs), less where the bundle is: a bundle copied
        to another machine or folder keeps its stages up to date."""
        dumped = self.recipe.model_dump(mode="json")
        dumped["data"].pop("prepared_dir", None)
        return {name: dumped[name] for name in names}

    def outputs_of(self, stage: str) -> list[dict]:
        """The outputs a finished earlier stage recorded (its hashes feed this stage's inputs)."""
        entry = self.manifest["stages"].get(stage)
        if entry is None or entry.get("status") not in ("done", "skipped"):
            state = "never ran" if entry is None else f"is {entry.get('status')}"
            raise StudyError(
                f"stage {stage} {state} in {self.bundle}: run it first (drop --from/--only, or include {stage})"
            )
        return entry.get("outputs", [])

    def status_of(self, stage: str) -> str | None:
        entry = self.manifest["stages"].get(stage)
        return None if entry is None else entry.get("status")
