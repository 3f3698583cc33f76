"""What crosstune adds to TRL's SFTTrainer: token-weighted loss for every Gemma class, per-step statistics for the
shared metrics (timed by progress.StepClock), atomic checkpoints with keep-last rotation, and a rich progress bar."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from trl import SFTTrainer

from crosstune.confinement import remove
from crosstune.run.bucket import BucketCopy
from crosstune.run.integrity import record_checksums
from crosstune.run.layout import step_folders
from crosstune.run.metrics import MetricsWriter
from crosstune.run.records import RunTimings
from crosstune.train.backend import RunContext
from crosstune.train.progress_bar import ProgressBar
from crosstune.train.torch.checkpoints import ADAPTER_STAGING, STAGING
from crosstune.train.torch.progress import StepClock, peak_memory_gib, sync_device, torch_compile_seconds

# TrainerCallbacks every CrosstuneSFTTrainer of this process also calls: a benchmark's clock
# (crosstune.train.parts.torch_trainer_callbacks); empty in training.
ADDED_CALLBACKS: list[Any] = []


class CrosstuneSFTTrainer(SFTTrainer):
    """SFTTrainer with the loss normalisation pinned and the per-step counts the metrics need."""

    def __init__(
        self,
        *args: Any,
        keep_last: int,
        shard_source: Path | None = None,
        bucket: BucketCopy | None = None,
        **kwargs: Any,
    ):
        kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), *ADDED_CALLBACKS]
        super().__init__(*args, **kwargs)
        self.bucket = bucket  # the run directory's copy: pushed after every checkpoint (preemption)
        self.shard_source = shard_source  # the checkpoint this rank reads its FSDP2 shard from (a meta base)
        # Trainer passes `num_items_in_batch` (the trained-token count of the whole optimizer step, summed over
        # micro-batches and ranks) only when the model "accepts loss kwargs". Gemma 3/4 ForConditionalGeneration
        # (multimodal checkpoints) declare False, which silently turns the loss into a per-micro-batch mean.
        # SFTTrainer computes the loss itself from the fused LM head, so the step-wide count is always right here.
        self.model_accepts_loss_kwargs = True
        self.keep_last = keep_last
        # This rank's sums over the step's micro-batches, kept on the device (no host sync until a metrics row):
        self._loss_sum = 0  # the losses training_step returns
        self._trained_tokens = 0  # tokens with a label (after the shift)
        self._tokens = 0  # non-padding tokens
        self._computed = 0  # token positions the model ran (padding-free rows: the same as _tokens)
        self._grad_norm = None
        self.save_seconds = 0.0  # in _save_checkpoint: kept out of the step times (run.json's checkpoint_time_s)
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        for noisy in (PrinterCallback, ProgressCallback):  # StepMetricsCallback prints progress instead
            self.remove_callback(noisy)

    def training_step(self, model, inputs, num_items_in_batch=None):
        labels, mask = inputs["labels"], inputs.get("attention_mask")
        self._trained_tokens = self._trained_tokens + (labels[..., 1:] != -100).sum()
        self._tokens = self._tokens + (mask.sum() if mask is not None else labels.numel())
        self._computed = self._computed + inputs["input_ids"].numel()
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._loss_sum = self._loss_sum + loss
        return loss

    def _get_grad_norm(self, model, grad_norm=None):
        self._grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        return self._grad_norm

    def pop_step(self) -> tuple[float, int, int, int, float]:
        """(loss, trained tokens, tokens, computed tokens, grad norm) of the step just finished, over all ranks.
        Collective: every rank calls it. Each rank's loss is its share of sum(token losses) / (step's trained
        tokens of all ranks), scaled by the world size (TRL, average_tokens_across_devices) -> the mean over
        ranks is the step's loss."""
        import torch

        acc = self.accelerator
        sums = (self._loss_sum, self._trained_tokens, self._tokens, self._computed)
        packed = torch.stack([torch.as_tensor(x, device=acc.device).double() for x in sums])
        total = acc.reduce(packed, reduction="sum") if acc.num_processes > 1 else packed
        loss, trained, tokens, computed = total.tolist()  # the one host sync of a metrics row
        grad_norm = float(self._grad_norm) if self._grad_norm is not None else float("nan")
        self.discard_step()
        return loss / acc.num_processes, round(trained), round(tokens), round(computed), grad_norm

    def discard_step(self) -> None:
        self._loss_sum, self._trained_tokens, self._tokens, self._computed = 0, 0, 0, 0

    def _prepare_for_training(self, max_steps, train_dataloader, resume_from_checkpoint):
        """Trainer's preparation (accelerate's fully_shard); with a meta base, this rank's shard is read right after
        sharding and before a checkpoint is resumed (the resume reads the LoRA into a model with real weights)."""
        if self.shard_source is None:
            return super()._prepare_for_training(max_steps, train_dataloader, resume_from_checkpoint)
        from crosstune.train.torch.sharded_load import load_local_shards

        model, train_dataloader = super()._prepare_for_training(max_steps, train_dataloader, None)
        load_local_shards(model, self.shard_source)
        if resume_from_checkpoint is not None:  # what Trainer does there for FSDP, now that the weights are real
            self._load_from_checkpoint(resume_from_checkpoint, self.model_wrapped)
            self._load_optimizer_and_scheduler(resume_from_checkpoint)
            self._load_scaler(resume_from_checkpoint)
        return model, train_dataloader

    # --- checkpoints ------------------------------------------------------------------------------------------
    def _save_checkpoint(self, model, trial):
        """Timed (the step before it finished first, as the jax backend's SaveTimer does)."""
        sync_device()
        t0 = time.perf_counter()
        try:
            self._save_checkpoint_atomically(model, trial)
        finally:
            self.save_seconds += time.perf_counter() - t0

    def _save_checkpoint_atomically(self, model, trial):
        """Trainer writes checkpoint-N in place; write it under .staging/ and rename it into place instead."""
        root = Path(self.args.output_dir)
        staging = root / STAGING
        name = f"checkpoint-{self.state.global_step}"
        self.args.output_dir = str(staging)
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.output_dir = str(root)
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            record_checksums(staging / name)  # complete now: export and --resume verify against these
            final = root / name
            if final.exists():  # a stale checkpoint of an interrupted timeline: replace it
                remove(final)
            os.replace(staging / name, final)
            remove(staging)
            for old in list(step_folders(root.parent).values())[: -self.keep_last]:
                remove(old)
            if self.bucket is not None:  # inside the timed save: a step's time is not the upload's
                self.bucket.push_checkpoint(self.state.global_step)
        self.accelerator.wait_for_everyone()

    def save_adapter(self, out_dir: Path) -> None:
        """The final PEFT adapter (adapter_config.json + adapter_model.safetensors), written atomically."""

        out_dir = Path(out_dir)
        tmp = out_dir.with_name(ADAPTER_STAGING)
        if self.args.should_save:
            remove(tmp)
        self.save_model(str(tmp))  # collective under FSDP (gathers the LoRA weights)
        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            (tmp / "training_args.bin").unlink(missing_ok=True)
            record_checksums(tmp)
            if out_dir.exists():
                remove(out_dir)
            os.replace(tmp, out_dir)
        self.accelerator.wait_for_everyone()


class StepMetricsCallback(TrainerCallback):
    """Writes the shared metrics (crosstune.run.metrics) every `log_every` steps and shows a progress bar.

    A row describes the step it is logged at (loss, learning rate, grad norm, tokens); `step_time_s` is the mean
    wall time per step since the previous row (progress.StepClock), so there is one device sync per row rather than
    per step, and one after the first step, whose warm-up is measured apart."""

    def __init__(self, context: RunContext):
        self.context, self.run_dir, self.progress = context, context.run_dir, context.progress
        self.compiled = context.recipe.train.kernels.compile
        self.trainer: CrosstuneSFTTrainer | None = None
        self.writer = None
        self.clock: StepClock | None = None
        self._bar = None
        self._lr = float("nan")

    def bind(self, trainer: CrosstuneSFTTrainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return  # rows, timings and the bar are rank 0's
        self.writer = MetricsWriter(self.run_dir, resume_from_step=state.global_step)
        self.rows = self.context.metrics_row_builder(devices=args.world_size)  # the one builder of metrics rows
        self._bar = ProgressBar("torch", state.max_steps, state.global_step, self.progress)
        self._start = state.global_step
        self._compile0 = torch_compile_seconds() if self.compiled else 0.0
        self.clock = StepClock(self._excluded, warm_up=not self.compiled)

    def _excluded(self) -> float:
        """Seconds so far that are no step's time: checkpoint saves and torch.compile's compilation."""
        compiled = torch_compile_seconds() - self._compile0 if self.compiled else 0.0
        return self.trainer.save_seconds + compiled

    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        self._lr = optimizer.param_groups[0]["lr"]  # before the scheduler steps: the rate this step applied

    def on_step_end(self, args, state, control, **kwargs):
        logged = not state.global_step % args.logging_steps or state.global_step == state.max_steps
        if not logged:
            self.trainer.discard_step()
        else:
            loss, trained, tokens, computed, grad_norm = self.trainer.pop_step()  # collective: syncs the device too
        if self.clock is None:
            return
        self.clock.tick()
        if not logged:
            if self.clock.times_first_step:
                sync_device()
                self.clock.measure(None)
            return
        sync_device()
        row = dict(
            step=state.global_step,
            loss=loss,
            learning_rate=self._lr,
            grad_norm=grad_norm,
            trained_tokens=trained,
            tokens=tokens,
            computed_tokens=computed,
            peak_memory_gib=peak_memory_gib(),
        )
        for ready, step_time_s in self.clock.measure(row):
            self._write(ready, step_time_s)

    def _write(self, row: dict, step_time_s: float) -> None:
        m = self.rows.row(**row, step_time_s=step_time_s)
        self.writer.write(m)
        self._bar.update(m)

    def timings(self) -> RunTimings:
        """Rank 0's compile and checkpoint seconds (run.json: RunTimings)."""
        if self.compiled:
            compile_s, measure = torch_compile_seconds() - self._compile0, "torch.compile"
        else:
            compile_s, measure = self.clock.warmup_s, "first-step warm-up"
        return RunTimings(
            compile_time_s=compile_s, compile_time_measure=measure, checkpoint_time_s=self.trainer.save_seconds
        )

    def on_train_end(self, args, state, control, **kwargs):
        if self.clock is None:
            return
        for ready, step_time_s in self.clock.finish():
            self._write(ready, step_time_s)
        self._bar.close()
        self.writer.finish(self.timings(), step=self._start)
