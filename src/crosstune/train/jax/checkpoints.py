"""The jax backend's checkpoints, readable without building a model: `<run>/checkpoints/<step>/model_params` (an
Orbax PyTree of the nnx.LoRAParam values a tunix PeftTrainer saves) and `optimizer_state`; digit-named step
folders are committed ones (Orbax's temp folders are not: crosstune.run.layout.step_folders)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from crosstune.run.layout import step_folders
from crosstune.run.lora_weights import ExportError
from crosstune.train.jax.lora import param_name


def read_orbax_lora(run_dir: Path, step: int | None = None) -> tuple[dict[str, np.ndarray], int]:
    """({dotted param name: array}, step) from a JAX run's checkpoint at `step` (latest when None)."""
    import logging

    import jax
    import orbax.checkpoint as ocp

    from crosstune.train.jax.layer_scan import ScanError, per_layer

    found = step_folders(run_dir)
    steps = list(found)
    if not steps:
        raise ExportError(f"{run_dir}/checkpoints: no Orbax checkpoint (digit-named step directory)")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise ExportError(f"{run_dir}/checkpoints: no step {step}; available: {steps}")
    path = found[step] / "model_params"
    if not path.is_dir():
        raise ExportError(f"{path}: missing (a tunix checkpoint keeps the LoRA params there)")
    logging.getLogger("absl").setLevel(logging.ERROR)  # Orbax warns about per-item metadata tunix doesn't write
    checkpointer = ocp.PyTreeCheckpointer()
    try:
        tree = checkpointer.metadata(path).item_metadata.tree
        restore = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
        restored = checkpointer.restore(path, args=ocp.args.PyTreeRestore(restore_args=restore))
    except Exception as e:  # Orbax raises many types for a damaged checkpoint
        raise ExportError(f"{path}: can't read the Orbax checkpoint: {type(e).__name__}: {e}") from None
    flat = jax.tree_util.tree_flatten_with_path(restored)[0]
    try:  # a stacked model's layers (backend.jax.scan_layers) as tunix names them
        return per_layer({param_name(p): np.asarray(v) for p, v in flat}), step
    except ScanError as e:
        raise ExportError(f"{path}: {e}") from None
