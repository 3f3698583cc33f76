"""Builders for export tests: random PEFT adapters, fake run directories, re-sharded/re-typed base checkpoints, and
logits from transformers, PEFT and the tunix model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from tests.helpers.records import TARGETS, write_record

TOKENS = np.random.default_rng(0).integers(10, 1000, size=(2, 24))


def random_adapter(base_dir: Path, family: str, out_dir: Path, *, rank=4, alpha=8.0, seed=0, targets=TARGETS) -> Path:
    """A PEFT adapter on `base_dir` with random non-zero A and B (independent A for k and v)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from crosstune.families import get_family

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=get_family(family).peft_target_regex(targets))
    peft_model = get_peft_model(model, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if "lora_A" in name else 0.05))
    peft_model.save_pretrained(out_dir)
    return Path(out_dir)


def write_run_json(run_dir: Path, *, backend: str, family: str, base: Path, rank, alpha, targets=TARGETS, **extra):
    """run.json as training writes it (tests.helpers.records), for a run of `family` on `base`."""
    write_record(run_dir, backend, family=family, base=base, rank=rank, alpha=alpha, targets=targets, **extra)


def write_export_manifest(folder: Path, kind: str, *, chat_template_sha256: str | None, step: int = 20) -> Path:
    """export_manifest.json as the exporter writes it (crosstune.export.export_folder.write_manifest), listing the
    files in `folder`, for an export of a run at `step` trained on that chat template."""
    from crosstune.export.export_folder import write_manifest

    source = {
        "run_dir": "/runs/tiny",
        "backend": "torch",
        "recipe_hash": "r" * 16,
        "chat_template_sha256": chat_template_sha256,
        "step": step,
        "checkpoint": f"/runs/tiny/checkpoints/step_{step}",
        "base_model": "/models/tiny",
        "rank": 8,
        "alpha": 16.0,
        "targets": list(TARGETS),
    }
    return write_manifest(folder, kind, {}, source)


def torch_run(run_dir: Path, base: Path, family: str, *, rank=4, alpha=8.0, seed=0, targets=TARGETS) -> Path:
    """A run directory as the torch backend leaves it: run.json + adapter/ (a random adapter)."""
    random_adapter(base, family, run_dir / "adapter", rank=rank, alpha=alpha, seed=seed, targets=targets)
    write_run_json(run_dir, backend="torch", family=family, base=base, rank=rank, alpha=alpha, targets=targets)
    return run_dir


def reshard(base: Path, out: Path, n_shards: int, *, prefix: str | None = None, dtype=None, extra=None) -> Path:
    """Copy an HF checkpoint as `n_shards` safetensors files + index, optionally renaming `model.` to `prefix`,
    casting floats to `dtype`, and adding `extra` tensors."""
    import torch
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(base / "model.safetensors"))
    if prefix:
        tensors = {prefix + k[len("model.") :] if k.startswith("model.") else k: v for k, v in tensors.items()}
    if dtype is not None:
        tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}
    tensors.update(extra or {})
    out.mkdir(parents=True)
    for p in base.iterdir():
        if p.is_file() and not p.name.endswith(".safetensors"):
            shutil.copy2(p, out / p.name)
    names = sorted(tensors)
    chunks = np.array_split(np.arange(len(names)), n_shards)
    weight_map = {}
    for i, idx in enumerate(chunks):
        fname = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        save_file({names[j]: tensors[names[j]].contiguous() for j in idx}, str(out / fname), metadata={"format": "pt"})
        weight_map.update({names[j]: fname for j in idx})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    if dtype is not None:
        cfg = json.loads((out / "config.json").read_text())
        cfg["dtype"] = str(dtype).removeprefix("torch.")
        (out / "config.json").write_text(json.dumps(cfg, indent=2))
    del torch
    return out


def hf_logits(model_dir: Path, tokens=TOKENS, dtype="float64") -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    with torch.no_grad():
        return model(torch.tensor(tokens, dtype=torch.long)).logits.float().numpy()


def peft_logits(base: Path, adapter: Path, tokens=TOKENS, dtype="float64") -> np.ndarray:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, dtype)).eval()
    model = PeftModel.from_pretrained(model, adapter).eval()
    with torch.no_grad():
        return model(torch.tensor(tokens, dtype=torch.long)).logits.float().numpy()


class LoraSpec:
    """The recipe's lora block, as build_model reads it."""

    def __init__(self, rank, alpha, targets=TARGETS, dropout=0.0):
        self.rank, self.alpha, self.targets, self.dropout = rank, alpha, list(targets), dropout


def jax_lora_model(family: str, base: Path, rank: int, alpha: float, targets=TARGETS):
    """(model, mesh): the tunix model of `base` with Qwix LoRA, on a 1×2 (fsdp, tp) mesh."""
    from crosstune.train.jax.model import build_model, make_mesh, mesh_context

    mesh = make_mesh(1, 2)
    with mesh_context(mesh):
        model, _ = build_model(family, base, mesh, lora=LoraSpec(rank, alpha, targets))
    return model, mesh


def jax_logits(model, mesh, tokens=TOKENS) -> np.ndarray:
    import jax.numpy as jnp

    from crosstune.train.jax.loss import attention_mask
    from crosstune.train.jax.model import mesh_context

    b, length = tokens.shape
    positions = np.tile(np.arange(length, dtype=np.int32), (b, 1))
    with mesh_context(mesh):
        logits, _ = model(
            jnp.asarray(tokens, jnp.int32),
            jnp.asarray(positions),
            None,
            attention_mask(jnp.ones((b, length), jnp.int32)),
        )
    return np.asarray(logits, dtype=np.float32)


def randomize_lora(model, seed: int, rank: int) -> None:
    """Non-zero A and B everywhere (B is zero after init), except the off-diagonal blocks of fused k/v block LoRAs,
    which training keeps at zero (crosstune.train.jax.optimizer.keep_block_lora_diagonal)."""
    import jax
    from flax import nnx

    from crosstune.families.lora_layout import fused_block_mask

    rng = np.random.default_rng(seed)
    for path, node in nnx.iter_graph(model):
        if isinstance(node, nnx.LoRAParam):
            scale = 0.3 if str(path[-1]).endswith("_lora_a") else 0.05
            value = (rng.standard_normal(node.value.shape) * scale).astype(np.float32)
            if str(path[-1]).endswith("_lora_b"):
                mask = fused_block_mask(f"{path[-3]}.{path[-2]}", value.shape, rank)
                value = value if mask is None else value * mask
            node.value = jax.device_put(value, node.value.sharding)


def jax_run(run_dir: Path, base: Path, family: str, *, rank=4, alpha=8.0, seed=0, step=3, targets=TARGETS):
    """A run directory as the jax backend leaves it (run.json + a tunix Orbax checkpoint of random non-zero LoRA
    params at `step`); returns the JAX model's logits on TOKENS."""
    from tunix.sft.checkpoint_manager import CheckpointManager

    model, mesh = jax_lora_model(family, base, rank, alpha, targets)
    randomize_lora(model, seed, rank)
    logits = jax_logits(model, mesh)
    manager = CheckpointManager(str(run_dir / "checkpoints"))
    manager.save(step, model, save_only_lora_params=True, force=True)
    manager.close()
    write_run_json(run_dir, backend="jax", family=family, base=base, rank=rank, alpha=alpha, targets=targets)
    return logits


def assert_logits_close(got: np.ndarray, want: np.ndarray, rel: float) -> None:
    """max |got - want| <= rel * max |want|. fp32 rounding errors grow with the logits' magnitude (the tiny models'
    logits reach about ±10 with their randomised norms), so the limit is relative to it, never a fixed number."""
    scale = float(np.abs(want).max())
    err = float(np.abs(got - want).max())
    assert err <= rel * scale, f"max |Δlogits| {err:.3g} > {rel:g} × max|logit| {scale:.3g} (ratio {err / scale:.3g})"
