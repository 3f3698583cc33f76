"""FSDP2 without the whole model on any rank: the base is built on the meta device (its buffers real), accelerate's
`fully_shard` splits the meta parameters as usual, and each rank then reads only its own rows of every base tensor
from the checkpoint's safetensors (`safe_open(...).get_slice`: the files are memory-mapped, the other ranks' rows
are never read). The LoRA weights, which PEFT puts on the meta device beside a meta base, are made real before the
run's initial LoRA is installed.

Why not accelerate's `cpu_ram_efficient_loading`: rank 0 still loads the whole model and broadcasts every tensor,
and its loader assumes every state-dict entry became a sharded DTensor, which fails on Gemma 4's persistent
`layer_scalar` buffers (plain tensors: FSDP2 shards parameters, not buffers). Here parameters are read by shard
and persistent buffers whole (they are small), each where it lives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crosstune.untrusted_files import read_json

# The checkpoint's key for a model key, when they differ: transformers' multimodal Gemma 3 class saves (and the
# official checkpoints store) its legacy names.
LEGACY_PREFIXES = (
    ("model.language_model.", "language_model.model."),
    ("model.vision_tower.", "vision_tower."),
    ("model.multi_modal_projector.", "multi_modal_projector."),
)


def empty_causal_lm(path: Path, dtype: Any, attn: str) -> Any:
    """The checkpoint's model class with every parameter on the meta device and its buffers real (rotary tables,
    Gemma 4's layer scalars at their init values until `load_local_shards` reads them)."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
    model.tie_weights()  # from_config leaves a meta LM head untied; from_pretrained ties it
    return model


def materialize_lora(model: Any, device: Any) -> int:
    """Give PEFT's LoRA layers that sit on the meta device (beside a meta base) real, uninitialised storage on
    `device`; the caller installs their values. Returns how many layers it materialised."""
    count = 0
    for name, module in model.named_modules():
        if (".lora_A." in name or ".lora_B." in name) and any(p.is_meta for p in module.parameters(recurse=False)):
            module.to_empty(device=device, recurse=False)
            count += 1
    return count


def load_local_shards(model: Any, checkpoint: Path) -> dict[str, int]:
    """After `fully_shard`: replace every meta parameter (a DTensor sharded on dim 0 over a 1-D mesh, torch.chunk's
    split) by this rank's rows read from `checkpoint`, and every persistent buffer by its checkpoint value, in the
    model's dtypes. Returns counts: parameters, buffers, bytes read by this rank."""
    import torch
    from safetensors import safe_open
    from torch.distributed.tensor import DTensor, Shard

    index = _weight_map(checkpoint)
    files: dict[str, Any] = {}

    def tensor_slice(key: str):
        file = index[key]
        if file not in files:
            files[file] = safe_open(checkpoint / file, framework="pt")
        return files[file].get_slice(key)

    state: dict[str, Any] = {}
    read = 0
    for name, param in model.named_parameters():
        if not param.is_meta:
            continue
        key = _checkpoint_key(name, index)
        if not isinstance(param, DTensor) or param.device_mesh.ndim != 1 or param.placements != (Shard(0),):
            raise RuntimeError(f"{name}: expected a meta DTensor sharded on dim 0 over a 1-D mesh after fully_shard")
        mesh = param.device_mesh
        rank, world, rows = mesh.get_local_rank(), mesh.size(), param.shape[0]
        per_rank = -(-rows // world)  # torch.chunk: ceil(rows / world) rows each, the last ranks fewer or none
        lo, hi = min(rows, rank * per_rank), min(rows, (rank + 1) * per_rank)
        local = tensor_slice(key)[lo:hi].to(dtype=param.dtype, device=mesh.device_type)
        if tuple(local.shape) != tuple(param.to_local().shape):
            raise RuntimeError(
                f"{name}: rows {lo}:{hi} of {key} give {tuple(local.shape)}, the shard is "
                f"{tuple(param.to_local().shape)}"
            )
        read += local.numel() * local.element_size()
        dtensor = DTensor.from_local(
            local, mesh, param.placements, run_check=False, shape=param.shape, stride=param.stride()
        )
        state[name] = torch.nn.Parameter(dtensor, requires_grad=param.requires_grad)
    buffers = 0
    persistent = set(model.state_dict())
    for name, buf in model.named_buffers():
        if name in persistent and not isinstance(buf, DTensor):
            key = _checkpoint_key(name, index)
            state[name] = tensor_slice(key)[:].to(dtype=buf.dtype, device=buf.device)
            buffers += 1
    unexpected = model.load_state_dict(state, strict=False, assign=True).unexpected_keys  # LoRA: not in `state`
    if unexpected:
        raise RuntimeError(f"loading {checkpoint}: the model has no {unexpected[:3]}")
    if hasattr(model, "tie_weights"):
        model.tie_weights()  # a tied LM head follows the embedding it shares (assign replaced the parameter)
    left = [n for n, p in model.named_parameters() if p.is_meta]
    if left:
        raise RuntimeError(f"{len(left)} parameters still on the meta device after loading, e.g. {left[0]}")
    return {"parameters": len(state) - buffers, "buffers": buffers, "bytes": read}


def _weight_map(checkpoint: Path) -> dict[str, str]:
    """key -> safetensors file of a checkpoint, single-file or sharded with an index."""
    index = checkpoint / "model.safetensors.index.json"
    if index.is_file():
        return read_json(index)["weight_map"]
    from safetensors import safe_open

    with safe_open(checkpoint / "model.safetensors", framework="pt") as f:
        return {key: "model.safetensors" for key in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)


def _checkpoint_key(name: str, index: dict[str, str]) -> str:
    """The checkpoint key of a parameter or buffer of the PEFT-wrapped model."""
    key = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
    if key in index:
        return key
    for ours, theirs in LEGACY_PREFIXES:
        if key.startswith(ours) and theirs + key[len(ours) :] in index:
            return theirs + key[len(ours) :]
    raise RuntimeError(f"{name}: no tensor {key} in the checkpoint (is model.path the model this run was built for?)")
