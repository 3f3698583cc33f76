"""The contract between the training session and the two backends, and the registry that names them.

    backend = get_backend(name, recipe, **launch)   # processes/devices started; `lead` says who owns the run
    backend.setup(context)                          # model, LoRA, optimizer, data loader for the context's plan
    backend.facts()                                 # what only the stack knows, for run.json (StackFacts)
    result = backend.fit()                          # train to the plan's last step (resuming when asked)
    backend.read_lora(run_dir, step, spec, record)  # a saved step's LoRA in the PEFT layout (export reads this)
    backend.close()

    backend.probe(prepared, lora, rows, bf16)       # a StepProbe: one optimizer step on given rows, given LoRA

Only crosstune.train.session drives it; the CLI, demo, export and parity talk to the session. Every failure a user
can act on is a TrainError (or another CrosstuneError) whose message says what to change.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from crosstune.data.prepared import PreparedDataset, open_prepared
from crosstune.errors import CrosstuneError
from crosstune.families.spec import ModelSpec
from crosstune.recipe import Recipe
from crosstune.recipe.schema import BACKEND_NAMES, RESOLVED
from crosstune.run.bucket import BucketCopy
from crosstune.run.lora_weights import LoraWeights
from crosstune.run.metrics import MetricsRowBuilder
from crosstune.run.records import RunRecord, StackFacts
from crosstune.train.step_plan import StepPlan
from crosstune.untrusted_files import parse_json

# backend name (crosstune.recipe.schema.BACKEND_NAMES) -> "module:class": train/<name>/backend.py's <Name>Backend;
# the modules import their stacks (torch, jax) only when a backend is built.
BACKENDS = {name: f"crosstune.train.{name}.backend:{name.title()}Backend" for name in BACKEND_NAMES}


class TrainError(CrosstuneError, RuntimeError):
    """A run that can't start or finish as configured; the message says why and what to change."""


@dataclass(frozen=True)
class RunContext:
    """What the session settles once, before any model is built, for every process of the run: the backends read
    it and recompute none of it."""

    recipe: Recipe
    run_dir: Path  # absolute, claimed by the session
    plan: StepPlan  # rows per step, accumulation, steps (crosstune.train.step_plan)
    spec: ModelSpec  # the base checkpoint's shapes
    prepared: PreparedDataset  # the one prepared dataset, checked against the recipe and tokenizer
    data: dict[str, Any]  # its provenance, for run.json
    resume_from: int = 0  # the saved step training continues from (0: from the start)
    progress: bool = True
    bucket: BucketCopy | None = None  # the run directory's copy in a bucket: pushed after every checkpoint

    def metrics_row_builder(self, devices: int) -> MetricsRowBuilder:
        """The builder of this run's metrics rows, both backends' one (`devices`: the backend's device count)."""
        return MetricsRowBuilder.for_recipe(
            self.recipe,
            self.spec,
            devices=devices,
            accumulation=self.plan.accumulation,
            micro_batches_per_epoch=self.plan.micro_batches_per_epoch,
        )

    def to_json(self) -> str:
        """The context for a launched worker process (crosstune.train.torch.launch)."""
        base_dir = None if self.recipe.base_dir is None else str(self.recipe.base_dir)
        return json.dumps(
            {
                "recipe": self.recipe.model_dump(mode="json"),
                "base_dir": base_dir,
                "run_dir": str(self.run_dir),
                "plan": dataclasses.asdict(self.plan),
                "spec": dataclasses.asdict(self.spec),
                "prepared": str(self.prepared.path),
                "data": self.data,
                "resume_from": self.resume_from,
                "progress": self.progress,
                "bucket": None if self.bucket is None else self.bucket.to_dict(),
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> RunContext:
        d = parse_json(text, "the run context")
        recipe = Recipe.model_validate(d["recipe"], context={RESOLVED: True})  # every default written out
        if d["base_dir"] is not None:  # relative paths as in the recipe file
            recipe.located(Path(d["base_dir"]))
        return cls(
            recipe,
            Path(d["run_dir"]),
            StepPlan(**d["plan"]),
            ModelSpec.from_dict(d["spec"]),
            open_prepared(Path(d["prepared"])),
            d["data"],
            d["resume_from"],
            d["progress"],
            BucketCopy.from_dict(d.get("bucket")),
        )


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    final_loss: float
    losses: list[float] = field(default_factory=list)
    adapter_dir: Path | None = None  # <run>/adapter: the final LoRA as a PEFT adapter (both backends)


@dataclass
class FitResult:
    steps: int  # the optimizer step the run ended at (its last checkpoint / final adapter); its timings are in
    # run.json already (the backend's lead training process records them: crosstune.run.metrics.MetricsWriter.finish)
    adapter_written: bool = False  # the backend wrote <run>/adapter itself (torch: PEFT's own save, collective)
    lora: LoraWeights | None = None  # else the final LoRA (PEFT layout) for the session to write as <run>/adapter


@dataclass
class SavedLora:
    lora: LoraWeights
    step: int
    path: Path  # the checkpoint (or adapter) folder it was read from


class StepProbe(Protocol):
    """One optimizer step of the recipe's k micro-batches on the first rows of the prepared data, with a given LoRA
    (PEFT layout) installed, computed by the backend's own training code: what crosstune.parity.check compares."""

    tokens: int  # trained (loss) tokens of the step
    recomputes: bool  # activation recompute is on

    def loss_and_grads(self) -> tuple[float, dict[str, tuple[Any, Any]]]:
        """The step's token-weighted loss and {HF module: (dL/dA, dL/dB)} in the PEFT layout."""
        ...

    def step(self, freeze: dict[str, tuple[Any, Any]]) -> tuple[float, dict[str, tuple[Any, Any]]]:
        """One AdamW step at the peak learning rate (elements where `freeze` is 1 held), then (loss, LoRA)."""
        ...

    def sample_losses(self, samples: int, seed: int, dropout: float) -> list[float]:
        """The step's loss (no gradients) under `samples` LoRA dropout draws at rate `dropout`."""
        ...


class Backend(Protocol):
    """The lifecycle both backends implement, without subclassing: tests/train/test_backend_contract.py checks that
    each class in BACKENDS has every method below with its signature, and these attributes."""

    name: str
    lead: bool  # this process owns the run directory (writes run.json, metrics, the adapter)
    prepares_data: bool  # this process may prepare the data (no other process of the run reads it meanwhile)

    def data_parallel(self) -> tuple[int, int]:
        """(data-parallel devices, processes loading rows): what the step plan divides the global batch by."""
        ...

    def setup(self, context: RunContext) -> None: ...

    def facts(self) -> StackFacts:
        """Where and how this run trains (platform, precision, devices, processes, mesh), after setup: the part of
        run.json only the stack can say, in the keys both backends share."""
        ...

    def fit(self) -> FitResult: ...

    def read_lora(self, run_dir: Path, step: int | None, spec: ModelSpec, record: RunRecord) -> SavedLora:
        """The LoRA saved at `step` (latest when None) in the PEFT layout; checksums verified where recorded."""
        ...

    def close(self) -> None: ...

    def probe(self, prepared: PreparedDataset, lora: LoraWeights, rows: int, bf16: bool) -> StepProbe:
        """The step probe on `rows` rows per micro-batch (a bf16 base when `bf16`; LoRA and optimizer fp32)."""
        ...


def backend_class(name: str) -> type:
    if name not in BACKENDS:
        raise TrainError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def get_backend(name: str, recipe: Recipe | None = None, **launch: Any) -> Backend:
    """Backend `name` for `recipe` (None: only to read saved runs); `launch` takes backend-specific launch options
    (torch: node_rank, main_address), refused by a backend that has none."""
    return backend_class(name)(recipe, **launch)
