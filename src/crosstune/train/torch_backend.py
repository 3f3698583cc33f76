"""The PyTorch backend: TRL SFTTrainer + PEFT LoRA (+ FSDP2 through accelerate) on the prepared dataset.

Driven by crosstune.train.session (run directory, data, step plan, finalisation), top to bottom:
1. `TorchBackend.fit()` trains in this process (one device) or launches `devices × nodes` workers
   (crosstune.train.torch_launch), each running `train_in_process`.
2. `build_model()` loads the HF checkpoint and `lora_config()` targets the recipe's neutral targets through the
   family's regex (language model only: a multimodal checkpoint's vision tower is left alone).
3. `sft_config()` maps the recipe onto SFTConfig, setting every TRL default that differs from the recipe.
4. `CrosstuneSFTTrainer` (torch_callbacks) trains padding-free on pre-tokenized rows, writes the shared metrics,
   checkpoints atomically; the final adapter goes to <run>/adapter (PEFT's own save: collective under FSDP).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from crosstune.data import torch_dataset, training_data
from crosstune.data.prepare import data_provenance
from crosstune.data.prepared import PreparedDataset
from crosstune.export.lora import ExportError, LoraWeights, read_peft_adapter, text_module_name
from crosstune.families import get_family
from crosstune.families.base import HF_TARGET_MODULES
from crosstune.families.spec import ModelSpec
from crosstune.recipe import Recipe, resolve_path
from crosstune.train.backend import FitResult, SavedLora, StepProbe
from crosstune.train.integrity import verify_checksums
from crosstune.train.lora_init import initial_lora
from crosstune.train.metrics import read_metrics
from crosstune.train.resume import nothing_to_resume
from crosstune.train.rundir import write_run_metadata
from crosstune.train.steps import StepPlan, accumulation, plan_steps
from crosstune.train.torch_checkpoints import (
    ADAPTER_STAGING,
    STAGING,
    checkpoint_step,
    checkpoints,
    latest_checkpoint,
)
from crosstune.train.torch_launch import launch_workers

if TYPE_CHECKING:
    from crosstune.train.session import TrainingSession

console = Console(soft_wrap=True, highlight=False, markup=False)

SCHEDULES = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}
CHECKPOINTS = "checkpoints"
ADAPTER = "adapter"


# --- the backend lifecycle ------------------------------------------------------------------------------------
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
        self.session: TrainingSession | None = None

    def data_parallel(self) -> tuple[int, int]:
        """Every rank reads the whole shared order and accelerate deals out micro-batches: one loading process."""
        tb = self.recipe.backend.torch
        return tb.devices * tb.nodes, 1

    def setup(self, session: TrainingSession) -> None:
        self.session = session  # the model is built where it trains: here, or in each launched worker

    def fit(self) -> FitResult:
        s, tb = self.session, self.recipe.backend.torch
        if tb.devices * tb.nodes > 1:
            steps = launch_workers(s.recipe, s.run_dir, resume=s.resume, node_rank=self.node_rank,
                                   main_address=self.main_address)  # fmt: skip
        else:
            steps = train_in_process(s.recipe, s.run_dir, resume=s.resume, progress=s.progress)
        return FitResult(steps, adapter_written=True)

    def read_lora(self, run_dir: Path, step: int | None, spec: ModelSpec, meta: dict[str, Any]) -> SavedLora:
        """The final `<run>/adapter` (step None), or `<run>/checkpoints/checkpoint-S` (a PEFT adapter too)."""
        lora_meta = meta.get("lora") or {}
        if step is None and (run_dir / ADAPTER).is_dir():
            adapter, got = run_dir / ADAPTER, int(meta.get("steps") or _last_metrics_step(run_dir) or 0)
        else:
            found = dict(checkpoints(run_dir / CHECKPOINTS))
            if not found:
                raise ExportError(f"{run_dir}: no adapter/ and no checkpoints/checkpoint-N")
            got = max(found) if step is None else step
            if got not in found:
                raise ExportError(f"{run_dir}/checkpoints: no checkpoint-{step}; available steps {sorted(found)}")
            adapter = found[got]
        if not verify_checksums(adapter, "adapter" if adapter.name == ADAPTER else "checkpoint"):
            print(f"[export] {adapter}: no recorded checksums (an older crosstune): only the values are checked")
        lora, cfg = read_peft_adapter(adapter, family=meta.get("family"))
        if cfg.get("r") != lora_meta.get("rank") or float(cfg.get("lora_alpha")) != float(lora_meta.get("alpha")):
            raise ExportError(
                f"{adapter}/adapter_config.json: r={cfg.get('r')} alpha={cfg.get('lora_alpha')}, but run.json says "
                f"rank={lora_meta.get('rank')} alpha={lora_meta.get('alpha')}"
            )
        return SavedLora(lora, got, adapter)

    def close(self) -> None:
        return None

    def probe(self, prepared: PreparedDataset, lora: LoraWeights, rows: int, bf16: bool) -> StepProbe:
        from crosstune.train.torch_probe import TorchStepProbe

        return TorchStepProbe(self.recipe, prepared, lora, rows, bf16)


def _last_metrics_step(run_dir: Path) -> int | None:
    rows = read_metrics(run_dir)
    return int(rows[-1]["step"]) if rows else None


def train_in_process(recipe: Recipe, run_dir: Path, *, resume: bool = False, progress: bool = True) -> int:
    """One training process (the whole run on one device, or one rank of a launched multi-device run; the session
    holds the run directory's lock). Returns the optimizer step the final adapter (<run>/adapter) belongs to."""
    import torch
    from accelerate import PartialState

    from crosstune.train.torch_callbacks import CrosstuneSFTTrainer, StepMetricsCallback
    from crosstune.train.torch_kernels import kernel_trainer_class
    from crosstune.train.torch_layers import compile_decoder_layers, lora_input_casting

    run_dir = Path(run_dir).resolve()
    state = PartialState(cpu=not torch.cuda.is_available())  # as TrainingArguments will; a singleton
    ckpt_dir = run_dir / CHECKPOINTS
    resume_from = latest_checkpoint(ckpt_dir) if resume else None
    if resume_from is not None and not verify_checksums(resume_from, "checkpoint") and state.is_main_process:
        console.print(f"[resume] {resume_from} has no recorded checksums (an older crosstune): not verified")
    if state.is_main_process:
        _clear_staging(run_dir)
        if state.device.type != "cuda" and recipe.train.precision == "bf16":
            console.print("[precision] no GPU: training in fp32 (bf16 is for GPUs here)")
    state.wait_for_everyone()

    model, tokenizer = build_model(recipe, on_gpu=state.device.type == "cuda")
    dataset, plan, prepared = load_train_dataset(recipe, tokenizer, state.num_processes)
    if resume_from is not None and checkpoint_step(resume_from) >= plan.total_steps:
        raise nothing_to_resume(run_dir, checkpoint_step(resume_from), plan.total_steps)
    data = data_provenance(prepared)
    args = sft_config(recipe, run_dir, plan.total_steps, world_size=state.num_processes, progress=progress)
    lora, lora_meta = lora_config(recipe, model)
    callback = StepMetricsCallback(
        recipe, run_dir, model.config, micro_batches_per_epoch=plan.micro_batches_per_epoch, progress=progress
    )
    trainer_cls = kernel_trainer_class(CrosstuneSFTTrainer, recipe.train.kernels)  # train.kernels (torch_kernels)
    trainer = trainer_cls(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[callback],
        keep_last=recipe.train.keep_last,
    )
    callback.bind(trainer)
    install_initial_lora(trainer.model, recipe)  # a resumed run's checkpoint replaces it in trainer.train()
    kernels = recipe.train.kernels  # the decoder layers' fast paths (torch_layers)
    if kernels.compile:
        compile_decoder_layers(trainer.model, get_family(recipe.model.family).decoder_layer_class)
    lora_meta["trainable_params"] = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    if state.is_main_process:
        _write_metadata(recipe, run_dir, trainer, lora_meta, resume_from, data)

    with lora_input_casting(trainer.model, kernels):
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    trainer.save_adapter(run_dir / ADAPTER)
    state.wait_for_everyone()
    return trainer.state.global_step


def _clear_staging(run_dir: Path) -> None:
    """Drop half-written checkpoints and adapters (fixed names are safe: the run directory's lock is ours)."""
    shutil.rmtree(run_dir / CHECKPOINTS / STAGING, ignore_errors=True)
    shutil.rmtree(run_dir / ADAPTER_STAGING, ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)


def _write_metadata(
    recipe: Recipe, run_dir: Path, trainer: Any, lora_meta: dict, resume_from: Path | None, data: dict
) -> None:
    from crosstune.train.torch_callbacks import recomputes_activations

    args = trainer.args
    write_run_metadata(
        run_dir,
        recipe,
        "torch",
        model_class=type(trainer.model.get_base_model()).__name__,
        world_size=args.world_size,
        precision="bf16" if args.bf16 else "fp32",
        fsdp=bool(args.fsdp),
        gradient_checkpointing=recomputes_activations(args),
        resumed_from=str(resume_from) if resume_from else None,
        lora_layout=lora_meta,
        data=data,
    )


# --- data -------------------------------------------------------------------------------------------------------
def load_train_dataset(recipe: Recipe, tokenizer: Any, world_size: int) -> tuple[Any, StepPlan, Any]:
    """(rows, the step plan, the PreparedDataset): the prepared rows in the shared order
    (`rank_order`: seeded shuffle per epoch, as many epochs as the steps need), padding removed, with labels and
    seq_lengths.

    Every rank gets the whole order and accelerate deals out batches round-robin, so optimizer step s trains on
    rows [s·G, (s+1)·G) of the order (G = the global batch): the rows the JAX backend's step s reads. Steps and
    epochs are counted as the JAX backend counts them (crosstune.train.steps: one rule for both)."""
    prepared = training_data(recipe, tokenizer, may_prepare=world_size == 1)  # the session prepared it already
    plan = plan_steps(recipe.train, len(prepared.split("train")), world_size)
    dataset = torch_dataset(prepared, "train", seed=recipe.train.seed, epochs=plan.epochs_read)
    return dataset, plan, prepared


# --- model + LoRA -----------------------------------------------------------------------------------------------
def build_model(recipe: Recipe, *, on_gpu: bool) -> tuple[Any, Any]:
    """The base model (recipe dtype on GPU, fp32 on CPU) and its tokenizer, from `recipe.model.path`."""
    import torch
    from transformers import AutoTokenizer

    from crosstune.train.torch_kernels import load_causal_lm

    path = resolve_path(recipe, recipe.model.path)
    if path is None or not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path: no HF checkpoint (config.json) at {path}")
    dtype = getattr(torch, recipe.model.dtype) if on_gpu else torch.float32
    model = load_causal_lm(recipe, path, dtype, on_gpu=on_gpu)  # train.kernels.attention, model.random_init
    model.config.use_cache = False  # packed rows need per-document masks, which transformers skips with a cache
    return model, AutoTokenizer.from_pretrained(path)


def lora_config(recipe: Recipe, model: Any) -> tuple[Any, dict]:
    """PEFT LoraConfig for the recipe's neutral targets and the layout it will produce (for the log and run.json).

    Gemma 4 global layers reuse keys as values (k_eq_v) and have no v_proj: a `v` target adapts the sliding
    layers only. The layout comes from the model's own modules and is checked against the family's spec."""
    from peft import LoraConfig

    family = get_family(recipe.model.family)
    targets = list(recipe.lora.targets)
    regex = family.peft_target_regex(targets)
    found: dict[int, set[str]] = {}
    pattern = re.compile(regex)
    leaf_to_target = {v: k for k, v in HF_TARGET_MODULES.items()}
    for name, _ in model.named_modules():
        if pattern.match(name):
            layer, leaf = re.search(r"layers\.(\d+)\.(.+)$", name).groups()
            found.setdefault(int(layer), set()).add(leaf_to_target[leaf])
    spec = family.spec_from_hf_config(model.config.to_dict())
    expected = {i: set(spec.targets_present(i, targets)) for i in range(spec.num_layers)}
    if found != expected:
        raise RuntimeError(f"LoRA targets differ from the {family.name} spec: modules {found} vs spec {expected}")
    by_kind: dict[str, list[str]] = {}
    for i, kind in enumerate(spec.layer_types):
        by_kind.setdefault(kind, [t for t in targets if t in expected[i]])
    skipped = {t: [i for i in range(spec.num_layers) if t not in expected[i]] for t in targets}
    skipped = {t: layers for t, layers in skipped.items() if layers}
    notes = [
        f"{t} adapts {len(spec.layer_types) - len(layers)} of {spec.num_layers} layers: layers {layers} "
        f"({', '.join(sorted({spec.layer_types[i] for i in layers}))}) have no {HF_TARGET_MODULES[t]} "
        "(k_eq_v: keys are reused as values)"
        for t, layers in skipped.items()
    ]
    if int(os.environ.get("RANK", "0")) == 0:
        adapted = sum(len(v) for v in expected.values())
        console.print(f"[lora] r={recipe.lora.rank} alpha={recipe.lora.alpha} on {adapted} modules: {by_kind}")
        for note in notes:
            console.print(f"[lora] {note}")
    config = LoraConfig(
        r=recipe.lora.rank,
        lora_alpha=recipe.lora.alpha,
        lora_dropout=recipe.lora.dropout,
        target_modules=regex,
        bias="none",
        task_type="CAUSAL_LM",
    )
    meta = {
        "target_regex": regex,
        "modules": sum(len(v) for v in expected.values()),
        "targets_by_layer_type": by_kind,
        "skipped_layers": skipped,
        "notes": notes,
    }
    return config, meta


def peft_lora_params(model: Any) -> dict[tuple[str, str], Any]:
    """{(HF module name in the text-only layout, "A" | "B"): the PEFT parameter} of a PEFT-wrapped model."""

    params = {}
    for name, p in model.named_parameters():
        if ".lora_A." in name or ".lora_B." in name:
            module, part = name.split(".lora_")
            params[(text_module_name(module.removeprefix("base_model.model.")), part[0])] = p
    return params


def install_lora_weights(model: Any, lora: Any) -> None:
    """Copy `lora` (crosstune.export.lora.LoraWeights) into the PEFT model's lora_A/lora_B, which must cover exactly
    the same modules."""
    import torch

    params = peft_lora_params(model)
    wanted = {(m, part) for m in lora.modules for part in "AB"}
    if set(params) != wanted:
        raise RuntimeError(
            "the PEFT model's LoRA modules differ from the LoRA to install: model only "
            f"{sorted(set(params) - wanted)[:3]}, LoRA only {sorted(wanted - set(params))[:3]} (family layout mismatch)"
        )
    with torch.no_grad():
        for (module, part), p in params.items():
            p.copy_(torch.from_numpy(lora.modules[module][0 if part == "A" else 1]))


def install_initial_lora(model: Any, recipe: Recipe) -> None:
    """The run's initial LoRA from crosstune.train.lora_init (the JAX backend installs the same arrays), in place of
    PEFT's own draw: the two backends start bit for bit from the same adapter."""

    spec = get_family(recipe.model.family).spec_from_hf_config(model.get_base_model().config.to_dict())
    lora = recipe.lora
    install_lora_weights(model, initial_lora(spec, lora.rank, lora.alpha, lora.targets, recipe.train.seed))


# --- SFTConfig --------------------------------------------------------------------------------------------------
def fsdp_settings(recipe: Recipe) -> dict[str, Any]:
    """FSDP2 settings (TrainingArguments.fsdp_config keys): the family's decoder layer is the sharding unit; under
    FSDP, activation checkpointing belongs here rather than in `gradient_checkpointing`."""
    return {
        "version": 2,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "transformer_layer_cls_to_wrap": [get_family(recipe.model.family).decoder_layer_class],
        "reshard_after_forward": True,
        "state_dict_type": "FULL_STATE_DICT",  # LoRA weights and their optimizer state are small
        "activation_checkpointing": recipe.train.gradient_checkpointing,
        # Every rank reads the checkpoint to host RAM. accelerate 1.15's rank-0-only loading assumes every state-dict
        # entry becomes a sharded DTensor and fails on Gemma 4's persistent `layer_scalar` buffers.
        "cpu_ram_efficient_loading": False,
    }


def sft_config(recipe: Recipe, run_dir: Path, steps: int, *, world_size: int = 1, progress: bool = True) -> Any:
    """SFTConfig from the recipe. Every TRL/Trainer default that differs from the recipe is set here explicitly
    (TRL 1.16: gradient_checkpointing=True, bf16=True, lr 2e-5, logging every 10 steps, linear schedule, ...)."""
    import torch
    from trl import SFTConfig

    from crosstune.train.torch_layers import gradient_checkpointing_kwargs

    t = recipe.train
    on_gpu = torch.cuda.is_available()
    fsdp = recipe.backend.torch.fsdp and world_size > 1  # on CPU accelerate quietly runs this as DDP
    return SFTConfig(
        output_dir=str(run_dir / CHECKPOINTS),
        # length and optimizer
        max_steps=steps,  # from max_steps or epochs (the step plan); the rows already repeat per epoch
        num_train_epochs=1,
        learning_rate=t.learning_rate,
        lr_scheduler_type=SCHEDULES[t.schedule],
        warmup_steps=t.warmup_steps,
        # fused on GPUs (TRL's default); the for-each kernel on CPU gives bit-identical sharded and unsharded runs
        optim="adamw_torch_fused" if on_gpu else "adamw_torch",
        weight_decay=t.weight_decay,
        adam_beta1=t.adam_beta1,
        adam_beta2=t.adam_beta2,
        adam_epsilon=t.adam_eps,
        max_grad_norm=t.max_grad_norm or 0.0,  # 0 = no clipping (the norm is still measured)
        per_device_train_batch_size=t.per_device_batch_size,
        gradient_accumulation_steps=accumulation(t, world_size),  # from the global batch: per GPU
        seed=t.seed,
        data_seed=t.seed,
        # precision and memory
        bf16=on_gpu and t.precision == "bf16",
        fp16=False,
        use_cpu=not on_gpu,
        gradient_checkpointing=t.gradient_checkpointing and not fsdp,
        gradient_checkpointing_kwargs=gradient_checkpointing_kwargs(t.kernels),  # + TRL's `selective` key
        fsdp=fsdp,  # sharding and wrapping come from fsdp_config
        fsdp_config=fsdp_settings(recipe) if fsdp else None,
        ddp_find_unused_parameters=False,
        ddp_broadcast_buffers=False,  # Gemma's buffers are constants; re-broadcast per step (gloo), rank 1 drifted
        # data: already tokenized, masked and packed by `crosstune data prepare`, in the order it fixed
        packing=False,
        padding_free=True,
        max_length=None,
        completion_only_loss=True,
        assistant_only_loss=False,
        shuffle_dataset=False,
        train_sampling_strategy="sequential",
        dataloader_drop_last=False,
        dataloader_num_workers=0,
        average_tokens_across_devices=True,
        remove_unused_columns=True,
        # logging and checkpoints: crosstune writes metrics.jsonl/TensorBoard itself (StepMetricsCallback)
        logging_strategy="steps",
        logging_steps=t.log_every,
        logging_first_step=False,
        report_to="none",
        disable_tqdm=not progress,
        save_strategy="steps",
        save_steps=t.checkpoint_every,
        save_total_limit=t.keep_last,
        save_only_model=False,
        eval_strategy="no",
    )
