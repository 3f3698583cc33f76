"""The JAX backend: Tunix PeftTrainer + Qwix LoRA + Optax AdamW + Orbax checkpoints + Grain input, on a (fsdp, tp)
mesh (the training itself: crosstune.train.jax.worker).

Driven by crosstune.train.session, which hands it the RunContext (step plan from the global batch per fsdp shard,
prepared data, the base's shapes) and writes run.json's totals, loss.png and the PEFT adapter/ from the final LoRA.
Same schedule, hyper-parameters, loss definition, metric names and run-directory layout as the torch backend.
Multi-host: see crosstune.train.jax.data.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from crosstune.data.prepared import PreparedDataset
from crosstune.families.spec import ModelSpec
from crosstune.recipe import Recipe
from crosstune.run.integrity import verify_saved
from crosstune.run.layout import step_folders
from crosstune.run.lora_weights import LoraWeights
from crosstune.run.records import RunRecord, StackFacts
from crosstune.train.backend import FitResult, RunContext, SavedLora, StepProbe, TrainError
from crosstune.train.jax.checkpoints import read_orbax_lora
from crosstune.train.jax.data import configure_cpu_xla, maybe_initialize_distributed
from crosstune.train.jax.lora import qwix_to_lora


class JaxBackend:
    """The jax side of crosstune.train.backend's lifecycle: every process of a (multi-host) run builds one."""

    name = "jax"

    def __init__(self, recipe: Recipe | None, **launch: Any):
        if launch:
            raise TrainError(
                f"{', '.join(sorted(launch))}: torch launch options; the jax backend finds its processes from JAX_* "
                "variables (or CROSSTUNE_MULTIHOST=1)"
            )
        self.recipe, self.run = recipe, None
        self._stack = contextlib.ExitStack()
        if recipe is None:  # reading saved runs only
            self.lead = self.prepares_data = False
            return

        if recipe.hardware == "cpu":
            configure_cpu_xla(recipe.backend.jax.mesh.fsdp * recipe.backend.jax.mesh.tp)
        maybe_initialize_distributed()  # before anything touches a device
        import jax

        self.lead = jax.process_index() == 0
        self.prepares_data = jax.process_count() == 1  # several processes only read what was prepared before

    def data_parallel(self) -> tuple[int, int]:
        import jax

        return self.recipe.backend.jax.mesh.fsdp, jax.process_count()

    def setup(self, context: RunContext) -> None:
        from crosstune.train.jax.worker import JaxRun

        self.run = JaxRun(context)
        self._stack.enter_context(self.run.setup())

    def facts(self) -> StackFacts:
        return self.run.facts()

    def fit(self) -> FitResult:
        return self.run.fit()

    def read_lora(self, run_dir: Path, step: int | None, spec: ModelSpec, record: RunRecord) -> SavedLora:
        """The Orbax checkpoint `<run>/checkpoints/<step>/model_params`, through Qwix's layout to PEFT's."""

        found = step_folders(run_dir)
        if found and (step if step is not None else max(found)) in found:
            verify_saved(found[step if step is not None else max(found)], "checkpoint", "export")
        params, got = read_orbax_lora(run_dir, step)
        lora = qwix_to_lora(params, spec, rank=record.lora.rank, alpha=record.lora.alpha)
        return SavedLora(lora, got, step_folders(run_dir)[got] / "model_params")

    def close(self) -> None:
        self._stack.close()

    def probe(self, prepared: PreparedDataset, lora: LoraWeights, rows: int, bf16: bool) -> StepProbe:
        from crosstune.train.jax.probe import JaxStepProbe

        return JaxStepProbe(self.recipe, prepared, lora, rows, bf16)
