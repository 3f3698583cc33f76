"""Export any run directory (crosstune.run.layout) to a PEFT adapter and/or a merged HF model.

The LoRA of a step comes from crosstune.train.session.read_run_lora (the backend that wrote the run reads its own
checkpoint; the final adapter is <run>/adapter for both backends). Rank, alpha and family come from run.json; the
base from run.json's base_model unless `base` is given. Each output is written into a temp directory next to `out`
and renamed into place when complete, with export_manifest.json.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crosstune.errors import InputError
from crosstune.export.export_folder import staged_dir, write_manifest
from crosstune.export.merge import Progress, copy_side_files, plan_merge, side_files, write_merged_shards
from crosstune.families import model_dir_spec
from crosstune.families.spec import ModelSpec
from crosstune.fsutil import file_sha256
from crosstune.run.base_checkpoint import open_base
from crosstune.run.integrity import lora_magnitude_bound
from crosstune.run.layout import RUN_JSON, read_run_recipe
from crosstune.run.lora_weights import ExportError, LoraWeights, write_peft_adapter
from crosstune.run.records import read_run_record
from crosstune.train.session import read_run_lora

KINDS = ("adapter", "merged", "both")
# A run without its recipe or step (not written by `crosstune train`): lr 1e-2 (high for LoRA) × 3e4 steps × 3.16
# (Adam's largest per-step factor, crosstune.run.integrity) ≈ 1e3; a flipped exponent byte lands far beyond it.
UNKNOWN_RECIPE_BOUND = 1e3


@dataclass
class RunLora:
    lora: LoraWeights
    base: Path
    spec: ModelSpec
    source: dict = field(default_factory=dict)  # run dir, backend, step, checkpoint path (for the manifest)


def _base_spec(base: Path, family: str) -> ModelSpec:
    try:
        return model_dir_spec(base, family)
    except InputError as e:
        raise ExportError(f"{e} (the run trained {family}, run.json family; pass --base with that model)") from None


def load_run_lora(run_dir: Path, step: int | None = None, base: Path | None = None) -> RunLora:
    """The LoRA of a run at `step` (the final adapter / latest checkpoint when None), in the PEFT layout."""
    run_dir = Path(run_dir).resolve()
    record = read_run_record(run_dir)  # the schema guarantees lora.rank / alpha and family
    if not (base or record.base_model):
        raise ExportError(f"{run_dir / RUN_JSON} names no base_model: pass --base")
    base_dir = Path(base or record.base_model).resolve()
    spec = _base_spec(base_dir, record.family)
    source = {
        "run_dir": str(run_dir),
        "backend": record.backend,
        "recipe_hash": record.recipe_hash,
        "chat_template_sha256": record.data.chat_template_sha256,  # what the run trained on
    }
    saved = read_run_lora(run_dir, step, spec)  # through the backend that wrote the run: its checkpoint format
    lora = saved.lora
    source.update(step=saved.step, checkpoint=str(saved.path))
    lora.check(spec, where=str(source["checkpoint"]))
    lora.check_values(_magnitude_bound(run_dir, source["step"]), where=str(source["checkpoint"]))
    return RunLora(lora, base_dir, spec, source)


def _magnitude_bound(run_dir: Path, step: int | None) -> float:
    """The largest |LoRA value| this run's optimiser can have produced by `step` (crosstune.run.integrity)."""
    recipe = read_run_recipe(run_dir)
    steps = step or (recipe.train.max_steps if recipe is not None else None)
    if recipe is None or not steps:
        return UNKNOWN_RECIPE_BOUND
    return lora_magnitude_bound(recipe.train, steps)


def write_adapter_dir(run: RunLora, out_dir: Path, layer_prefix: str = "model.layers.") -> dict[str, str]:
    files = write_peft_adapter(run.lora, out_dir, str(run.base), spec=run.spec, layer_prefix=layer_prefix)
    return {p.name: file_sha256(p) for p in files}


def export_run(
    run_dir: Path,
    to: str,
    out: Path,
    *,
    step: int | None = None,
    base: Path | None = None,
    overwrite: bool = False,
    progress: Callable[[int], Progress] | None = None,
) -> dict[str, Path]:
    """Export `run_dir` as `to` (adapter | merged | both) into `out` (both: out/adapter and out/merged).
    Returns {kind: directory}. Nothing appears at `out` unless everything was written. `progress(total_bytes)`
    returns the callback the merge reports written bytes to."""
    if to not in KINDS:
        raise ExportError(f"--to {to!r}: choose one of {', '.join(KINDS)}")
    run = load_run_lora(run_dir, step, base)
    base_ckpt = open_base(run.base) if to != "adapter" else None
    plan = plan_merge(base_ckpt, run.lora) if base_ckpt is not None else None  # refuse before writing anything
    side: set[str] = set()
    if base_ckpt is not None:
        side = set(base_ckpt.files) | {"export_manifest.json"}
        side_files(run.base, side)  # a link out of the model's folder: refused before writing anything
    prefix = base_ckpt.layer_prefix() if base_ckpt is not None else open_base(run.base).layer_prefix()
    source = {
        **run.source,
        "base_model": str(run.base),
        "rank": run.lora.rank,
        "alpha": run.lora.alpha,
        "targets": list(run.lora.targets),
    }
    out = Path(out)
    made: dict[str, Path] = {}
    with staged_dir(out, overwrite=overwrite, sources=(run_dir, run.base)) as tmp:
        for kind in ("adapter", "merged") if to == "both" else (to,):
            where = tmp / kind if to == "both" else tmp
            where.mkdir(exist_ok=True)
            if kind == "adapter":
                hashes = write_adapter_dir(run, where, layer_prefix=prefix)
            else:
                advance = progress(base_ckpt.nbytes) if progress else None
                hashes = write_merged_shards(base_ckpt, run.lora, plan, where, advance)
                hashes.update(copy_side_files(run.base, where, skip=side))
            write_manifest(where, kind, hashes, source)
            made[kind] = (out / kind) if to == "both" else out
    return made
