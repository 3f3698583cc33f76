"""One training session above both backends (torchtune's recipe lifecycle): the part of a run that does not
depend on the stack.

    TrainingSession(recipe, backend, run_dir).run()
      claim the run directory (lock; an earlier run needs --resume; --resume checks the recipe)
      settle the RunContext: prepare the data (or reuse it), plan the steps, the base's shapes, the resume point
      backend.setup(context) -> run.json (the context + backend.facts()) -> backend.fit() -> backend.close()
      finalise: run.json's steps, loss.png, and <run>/adapter (a PEFT adapter) for both backends

run.json is written here for both backends, from one schema (crosstune.run.records); the backend's lead training
process adds its compile and checkpoint seconds when it ends (crosstune.run.metrics.MetricsWriter.finish).

`read_run_lora` gives any saved step's LoRA through the backend that wrote the run (export's only way in);
`step_probe` gives a backend's probe of one optimizer step (crosstune.parity.check compares two).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crosstune.confinement import remove
from crosstune.data.prepare import data_provenance, lenient_note, training_data
from crosstune.data.prepared import PreparedDataset
from crosstune.families import model_dir_spec
from crosstune.families.spec import ModelSpec
from crosstune.fsutil import say, staged_dir
from crosstune.recipe import Recipe, model_path
from crosstune.run.base_checkpoint import open_base
from crosstune.run.bucket import BucketCopy
from crosstune.run.integrity import record_checksums
from crosstune.run.layout import ADAPTER, CHECKPOINTS, METRICS_JSONL, RUN_JSON, TENSORBOARD, saved_steps
from crosstune.run.lora_weights import ExportError, LoraWeights, write_peft_adapter
from crosstune.run.metrics import read_metrics
from crosstune.run.plot import plot_loss_curve
from crosstune.run.records import read_run_record, update_run_record
from crosstune.run.resume import nothing_to_resume
from crosstune.run.rundir import default_run_dir, held_run_dir, start_run_record
from crosstune.train.backend import (
    Backend,
    FitResult,
    RunContext,
    SavedLora,
    StepProbe,
    TrainError,
    TrainResult,
    get_backend,
)
from crosstune.train.step_plan import plan_steps


class TrainingSession:
    """One run of `recipe` on `backend` into `run_dir`; `launch` holds the backend's launch options."""

    def __init__(
        self,
        recipe: Recipe,
        backend: str | None = None,
        run_dir: Path | None = None,
        *,
        resume: bool = False,
        progress: bool = True,
        bucket: BucketCopy | None = None,
        **launch: Any,
    ):
        self.recipe, self.resume, self.progress = recipe, resume, progress
        self.bucket = bucket  # the run directory's copy, pushed after every checkpoint (crosstune.run.bucket)
        self.backend_name = backend or recipe.backend.default
        self.run_dir = Path(run_dir) if run_dir is not None else default_run_dir(recipe, self.backend_name)
        self.launch = launch
        self.context: RunContext | None = None  # settled once the run directory is claimed (started)

    def run(self) -> TrainResult:
        with self.started() as backend:
            return self.fit(backend)

    @contextlib.contextmanager
    def started(self) -> Iterator[Backend]:
        """The run directory claimed, the run's context settled and `backend` set up with it (closed on exit)."""
        backend = get_backend(self.backend_name, self.recipe, **self.launch)
        with held_run_dir(self.run_dir, self.recipe, backend.name, resume=self.resume, lead=backend.lead) as run:
            self.run_dir = run
            self._check_earlier_run(backend.lead)
            self.context = self._settle(backend)
            try:
                backend.setup(self.context)
                if backend.lead:
                    self._start_record(backend)
                yield backend
            finally:
                backend.close()

    def fit(self, backend: Backend) -> TrainResult:
        """Train to the plan's last step, then finalise the run directory (lead process)."""
        fit = backend.fit()
        if backend.lead:
            self._finalise(fit)
        losses = [row.loss for row in read_metrics(self.run_dir)]
        final = losses[-1] if losses else float("nan")
        return TrainResult(self.run_dir, fit.steps, final, losses, self.run_dir / ADAPTER)

    # --- before training -------------------------------------------------------------------------------------
    def _check_earlier_run(self, lead: bool) -> None:
        """A fresh run never writes over an earlier one (every process refuses); a run starting from step 0 drops
        the void metrics (the lead process, which owns the run directory)."""
        steps = saved_steps(self.run_dir)
        if not self.resume and (steps or (self.run_dir / METRICS_JSONL).exists()):
            raise TrainError(
                f"{self.run_dir} holds an earlier run: pass --resume to continue it, or choose another --run-dir"
            )
        if not lead:
            return
        if self.resume and not steps:
            say(f"[resume] no complete checkpoint in {self.run_dir / CHECKPOINTS}: starting from step 0")
        if not steps:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / METRICS_JSONL).unlink(missing_ok=True)
            remove(self.run_dir / TENSORBOARD)  # a link is unlinked: its target is not the run's

    def _settle(self, backend: Backend) -> RunContext:
        """The one prepared dataset (made here when this is the run's only process), the step plan, the base's
        shapes and the resume point: computed once, for every process of the run."""
        recipe = self.recipe
        width, processes = backend.data_parallel()
        prepared = training_data(recipe, may_prepare=backend.prepares_data)
        data = data_provenance(prepared)
        if backend.lead and (note := lenient_note(data)):
            say(note)
        for warning in data["warnings"] if backend.lead else ():
            say(f"[data] warning: {warning}")
        plan = plan_steps(recipe.train, len(prepared.split("train")), width, processes)
        done = saved_steps(self.run_dir) if self.resume else []
        if done and done[-1] >= plan.total_steps:
            raise nothing_to_resume(self.run_dir, done[-1], plan.total_steps)
        base = model_path(recipe)  # a hub id: its snapshot, fetched when online (crosstune.hub)
        if base is None or not (base / "config.json").is_file():
            raise TrainError(f"model.path: no HF checkpoint (config.json + *.safetensors) at {base}")
        spec = model_dir_spec(base, recipe.model.family)
        resume_from = done[-1] if done else 0
        return RunContext(recipe, self.run_dir, plan, spec, prepared, data, resume_from, self.progress, self.bucket)

    def _start_record(self, backend: Backend) -> None:
        """run.json as training starts: the same keys from both backends, the step plan's global batch (from
        train.global_batch_size) among them."""
        ctx = self.context
        start_run_record(
            self.run_dir,
            self.recipe,
            backend.name,
            backend.facts(),
            spec=ctx.spec,
            global_batch=ctx.plan.global_batch,
            grad_accumulation=ctx.plan.accumulation,
            seq_len=ctx.prepared.max_seq_len,
            total_steps=ctx.plan.total_steps,
            resumed_from_step=ctx.resume_from,
            data=ctx.data,
        )

    # --- after training --------------------------------------------------------------------------------------
    def _finalise(self, fit: FitResult) -> None:
        """run.json's `steps` (the step the final adapter belongs to; export reads it), loss.png, adapter/."""
        ctx = self.context
        update_run_record(self.run_dir, steps=fit.steps)
        if (self.run_dir / METRICS_JSONL).exists():
            plot_loss_curve(self.run_dir)
        if not fit.adapter_written:  # the final LoRA as a PEFT adapter, keyed like the base checkpoint's layers
            base = model_path(self.recipe)
            lora = fit.lora if fit.lora is not None else read_run_lora(self.run_dir, fit.steps, ctx.spec).lora
            with staged_dir(self.run_dir / ADAPTER, may_replace=lambda _: None) as tmp:
                write_peft_adapter(lora, tmp, str(base), spec=ctx.spec, layer_prefix=open_base(base).layer_prefix())
            record_checksums(self.run_dir / ADAPTER)  # once in place: the staging marker is gone


def train(
    recipe: Recipe,
    run_dir: Path | None = None,
    *,
    backend: str | None = None,
    resume: bool = False,
    progress: bool = True,
    **launch: Any,
) -> TrainResult:
    """Train LoRA per `recipe` with `backend` (default: the recipe's) into `run_dir` (default:
    <output_dir>/<name>-<backend>); with `resume`, continue from its latest checkpoint."""
    return TrainingSession(recipe, backend, run_dir, resume=resume, progress=progress, **launch).run()


def read_run_lora(run_dir: Path, step: int | None = None, spec: ModelSpec | None = None) -> SavedLora:
    """The LoRA a run saved at `step` (latest when None), in the PEFT layout, through the backend that wrote it."""
    run_dir = Path(run_dir)
    record = read_run_record(run_dir)
    if spec is None:
        if not record.base_model:
            raise ExportError(f"{run_dir / RUN_JSON} names no base_model: pass --base")
        spec = model_dir_spec(Path(record.base_model), record.family)
    return get_backend(record.backend).read_lora(run_dir, step, spec, record)


def step_probe(
    recipe: Recipe, backend: str, prepared: PreparedDataset, lora: LoraWeights, rows: int, bf16: bool = False
) -> StepProbe:
    """Backend `backend`'s step probe for `recipe`: one optimizer step on the first `rows`-row micro-batches of
    `prepared` with `lora` installed (crosstune.train.backend.StepProbe)."""
    return get_backend(backend, recipe).probe(prepared, lora, rows, bf16)
