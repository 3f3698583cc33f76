"""The PyTorch backend: TRL SFTTrainer + PEFT LoRA (+ FSDP2 through accelerate) on the prepared dataset.

Driven by crosstune.train.session, which hands it the RunContext. `fit()` trains in this process (one device,
crosstune.train.torch.worker) or launches `devices × nodes` workers (launch.py), each running the same worker;
this process (node 0's launcher) owns the run directory. `read_lora` reads a run's PEFT adapter or checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from crosstune.data.prepared import PreparedDataset
from crosstune.families.spec import ModelSpec
from crosstune.recipe import Recipe
from crosstune.run.integrity import verify_saved
from crosstune.run.layout import ADAPTER, RUN_JSON, saved_lora, step_folders
from crosstune.run.lora_weights import ExportError, LoraWeights, read_peft_adapter
from crosstune.run.metrics import read_metrics
from crosstune.run.records import Mesh, RunRecord, StackFacts
from crosstune.train.backend import FitResult, RunContext, SavedLora, StepProbe
from crosstune.train.torch.launch import launch_workers
from crosstune.train.torch.worker import train_in_process


class TorchBackend:
    """The torch side of crosstune.train.backend's lifecycle. One device trains in this process; `backend.torch.
    devices × nodes` > 1 launches that many workers (accelerate with FSDP2 on GPUs; torchrun + gloo on CPU, where
    it is DDP), each running `train_in_process`; this process (node 0's launcher) owns the run directory."""

    name = "torch"

    def __init__(self, recipe: Recipe | None, *, node_rank: int = 0, main_address: str | None = None):
        self.recipe, self.node_rank, self.main_address = recipe, node_rank, main_address
        self.lead = node_rank == 0 and recipe is not None
        # the launcher of a one-node run prepares before any worker starts; several nodes read a prior preparation
        self.prepares_data = self.lead and recipe.backend.torch.nodes == 1
        self.context: RunContext | None = None

    def data_parallel(self) -> tuple[int, int]:
        """Every rank reads the whole shared order and accelerate deals out micro-batches: one loading process."""
        tb = self.recipe.backend.torch
        return tb.devices * tb.nodes, 1

    def setup(self, context: RunContext) -> None:
        self.context = context  # the model is built where it trains: here, or in each launched worker

    def facts(self) -> StackFacts:
        """From the recipe and this machine, as every worker will train (sft_config's rules: bf16 on GPUs only,
        FSDP2 with more than one GPU; on CPU accelerate runs FSDP as DDP, the parameters replicated)."""
        import torch

        from crosstune.families import get_family
        from crosstune.recipe.training_arguments import trains_in_bf16, uses_fsdp
        from crosstune.train.torch.config import parallelism
        from crosstune.train.torch.model import SHARDING_DEVICES

        r, tb = self.recipe, self.recipe.backend.torch
        on_gpu, world = torch.cuda.is_available(), tb.devices * tb.nodes
        sharded = uses_fsdp(r, world) and ("cuda" if on_gpu else "cpu") in SHARDING_DEVICES  # else DDP: replicas
        return StackFacts(
            platform="cuda" if on_gpu else "cpu",
            precision="bf16" if trains_in_bf16(r, on_gpu) else "fp32",
            devices=world,
            processes=world,
            mesh=Mesh(fsdp=world if sharded else 1, tp=1),
            details={
                "parallelism": parallelism(r, world, on_gpu),
                "peft_target_regex": get_family(r.model.family).peft_target_regex(list(r.lora.targets)),
            },
        )

    def fit(self) -> FitResult:
        tb = self.recipe.backend.torch
        if tb.devices * tb.nodes > 1:
            steps = launch_workers(self.context, node_rank=self.node_rank, main_address=self.main_address)
        else:
            steps = train_in_process(self.context)
        return FitResult(steps, adapter_written=True)

    def read_lora(self, run_dir: Path, step: int | None, spec: ModelSpec, record: RunRecord) -> SavedLora:
        """The final `<run>/adapter` (step None), or `<run>/checkpoints/checkpoint-S` (a PEFT adapter too)."""
        lora = record.lora
        if step is None and (run_dir / ADAPTER).is_dir():
            adapter, got = run_dir / ADAPTER, int(record.steps or _last_metrics_step(run_dir) or 0)
        else:
            found = step_folders(run_dir)
            if not found:
                raise ExportError(f"{run_dir}: no adapter/ and no checkpoints/checkpoint-N")
            got = max(found) if step is None else step
            if got not in found:
                raise ExportError(f"{run_dir}/checkpoints: no checkpoint-{step}; available steps {sorted(found)}")
            adapter = found[got]
        saved_lora(run_dir, adapter)  # nothing of it read through a link out of the run
        verify_saved(adapter, "adapter" if adapter.name == ADAPTER else "checkpoint", "export")
        weights, cfg = read_peft_adapter(adapter, family=record.family)
        if cfg.get("r") != lora.rank or float(cfg.get("lora_alpha")) != lora.alpha:
            raise ExportError(
                f"{adapter}/adapter_config.json: r={cfg.get('r')} alpha={cfg.get('lora_alpha')}, but {RUN_JSON} says "
                f"rank={lora.rank} alpha={lora.alpha}"
            )
        return SavedLora(weights, got, adapter)

    def close(self) -> None:
        return None

    def probe(self, prepared: PreparedDataset, lora: LoraWeights, rows: int, bf16: bool) -> StepProbe:
        from crosstune.train.torch.probe import TorchStepProbe

        return TorchStepProbe(self.recipe, prepared, lora, rows, bf16)


def _last_metrics_step(run_dir: Path) -> int | None:
    rows = read_metrics(run_dir)
    return rows[-1].step if rows else None
