"""Where an imported recipe runs and with what batch: the --hardware target (a TPU: the jax backend on a mesh of its
chips; a GPU box: the torch backend on its GPUs; none: this CPU), and the global batch the source config trained
with — rows per device × micro-batches per step × the devices it ran on (read where the config says, else
--source-devices, else one, said so) — split over the target's data-parallel devices. A batch the target's devices
can't split is rounded to the nearest multiple of them, saying from what to what and why; --global-batch sets it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crosstune.hardware import HARDWARE, HardwareTarget
from crosstune.recipe.porting.named_data import config_path
from crosstune.recipe.porting.named_model import ModelId
from crosstune.recipe.porting.port import ImportRefused, Port
from crosstune.untrusted_files import read_json

DEEPSPEED_BATCH = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


@dataclass(frozen=True)
class ImportOptions:
    """What the command line adds to a config: the target, the source's device count, an explicit global batch."""

    hardware: str | None = None
    source_devices: int | None = None
    global_batch: int | None = None


@dataclass(frozen=True)
class Batch:
    """A tool's batch as its config says it: rows per device and micro-batches per step (with the tool's key names),
    and the devices the config itself names (None: it doesn't) with where it names them."""

    per_device: int
    per_device_key: str
    accumulation: int
    accumulation_key: str
    devices: int | None = None
    devices_said: str = ""


def set_hardware(port: Port, hardware: str | None, model: ModelId) -> None:
    """The target a study runs on: a TPU gets the jax backend on a mesh of its chips (the widest tp that splits
    every head group, fsdp the rest), a GPU box the torch backend on its GPUs; none given keeps this CPU."""
    if hardware is None:
        port.notes.append("hardware: cpu (give --hardware, e.g. tpu-v5p-8, for the target the study runs on)")
        return
    hw = HARDWARE.get(hardware)
    if hw is None:
        raise ImportRefused(f"--hardware {hardware!r}: not a named target ({', '.join(HARDWARE)})")
    port.set("hardware", hardware)
    if hw.chip.platform == "tpu":
        spec = model.spec
        tp = max(t for t in (spec.shardable_tps(hw.devices) if spec else [1]) if hw.devices % t == 0)
        port.set("backend.default", "jax")
        port.set("backend.jax.mesh", {"fsdp": hw.devices // tp, "tp": tp})
        why = f"the widest that splits every head group of {spec.name}" if spec else "the model's heads are unknown"
        port.notes.append(
            f"backend.jax.mesh fsdp {hw.devices // tp} × tp {tp} over {hw.name}'s {hw.devices} chips (tp {tp}: {why})"
        )
    elif hw.chip.platform == "gpu":
        port.set("backend.default", "torch")
        port.set("backend.torch.devices", hw.devices)


def set_batch(port: Port, batch: Batch, options: ImportOptions) -> None:
    """train.global_batch_size from the source's batch (or --global-batch), split over the target's data-parallel
    devices: fewer rows per device where that divides it, else the batch rounded to a multiple of them. Each step of
    the derivation is a printed note."""
    devices, said = _source_devices(batch, options.source_devices)
    source = batch.per_device * batch.accumulation * devices
    derivation = (
        f"{batch.per_device_key} {batch.per_device} × {batch.accumulation_key} {batch.accumulation} × "
        f"{devices} GPU{'s' if devices > 1 else ''} ({said})"
    )
    width, across = _data_parallel(port)
    wanted = options.global_batch or source
    if options.global_batch is not None:
        if options.global_batch % width:
            raise ImportRefused(
                f"--global-batch {options.global_batch}: {across} split each step's rows {width} "
                f"ways: give a multiple of {width}"
            )
        port.notes.append(f"train.global_batch_size {wanted} (--global-batch; the config's is {source}: {derivation})")
    else:
        port.notes.append(f"train.global_batch_size {source}: {derivation}, rows per optimizer step")
    if wanted % width:
        rounded = max(width, (wanted + width // 2) // width * width)  # the nearest multiple, halves up
        port.notes.append(
            f"train.global_batch_size {rounded} (the config's {wanted}, rounded to the nearest multiple "
            f"of {width}): {across} split each step's rows {width} ways; --global-batch N sets another "
            f"multiple of {width}"
        )
        wanted = rounded
    per = next(p for p in range(batch.per_device, 0, -1) if wanted % (p * width) == 0)
    if per != batch.per_device:
        port.notes.append(
            f"train.per_device_batch_size {per}: {batch.per_device} rows per device don't split "
            f"{wanted} rows {width} ways ({across}); the backend accumulates the rest"
        )
    port.set("train.per_device_batch_size", per)
    port.set("train.global_batch_size", wanted)


def deepspeed_devices(value: Any, config_dir: Path, key: str) -> tuple[int | None, str]:
    """The GPUs a DeepSpeed config's batch arithmetic implies: train_batch_size over train_micro_batch_size_per_gpu ×
    gradient_accumulation_steps, when all three are numbers there (DeepSpeed's own rule; "auto" says nothing)."""
    config = value if isinstance(value, dict) else None
    if isinstance(value, str):
        path = config_path(value, config_dir)
        if not path.is_file():
            return None, f"{key} {value}: not at hand to read the batch arithmetic from"
        config = read_json(path)
    sizes = [config.get(k) if isinstance(config, dict) else None for k in DEEPSPEED_BATCH]
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 10**8 for v in sizes):
        return None, f'{key}: its batch sizes are not all numbers ("auto" takes them from the trainer)'
    total, micro, accumulation = sizes
    if total % (micro * accumulation):
        return None, f"{key}: train_batch_size {total} is not a multiple of the micro-batch × accumulation"
    return total // (micro * accumulation), f"{key}'s train_batch_size ÷ (micro-batch × accumulation)"


def _source_devices(batch: Batch, option: int | None) -> tuple[int, str]:
    """The devices the source config trained on and where that is said: --source-devices, else the config, else 1."""
    if option is not None:
        named = f"; the config says {batch.devices}: {batch.devices_said}" if batch.devices is not None else ""
        return option, f"--source-devices{named}"
    if batch.devices is not None:
        return batch.devices, batch.devices_said
    said = batch.devices_said or "the config does not say how many it trained on"
    return 1, f"{said}: --source-devices N says"


def _data_parallel(port: Port) -> tuple[int, str]:
    """The target's data-parallel devices (jax: the mesh's fsdp shards; torch: its GPUs) and the words for them."""
    hw: HardwareTarget = HARDWARE[port.get("hardware", "cpu")]
    if port.get("backend.default") == "jax":
        mesh = port.get("backend.jax.mesh", {})
        return mesh.get("fsdp", 1), f"{hw.name}'s mesh (fsdp {mesh.get('fsdp', 1)} × tp {mesh.get('tp', 1)})"
    devices = port.get("backend.torch.devices", 1)
    return devices, f"{hw.name}'s {devices} GPU{'s' if devices > 1 else ''}" if devices > 1 else f"{hw.name}"
