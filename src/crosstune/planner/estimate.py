"""`plan_recipe(recipe) -> Plan`: will this recipe's model fit this hardware with this mesh, before allocating?

Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.planner.estimate and crosstune.planner.memory"."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from crosstune.families import get_family, model_dir_spec
from crosstune.families.spec import DTYPE_BYTES, ModelSpec
from crosstune.hardware import HARDWARE, HardwareTarget
from crosstune.hub import HubError
from crosstune.planner.memory import Memory, memory, oom_message, scan_keeps_every_residual
from crosstune.planner.tensors import fitted, per_device_elements, trained_lora_tensors, tunix_tensors
from crosstune.recipe import Recipe, model_path
from crosstune.units import GB


@dataclass
class MeshOption:
    fsdp: int
    tp: int
    replicated: list[str]  # tensor groups kept whole over tp
    memory: Memory
    verdict: str  # "ok", "needs replication", "out of memory"


@dataclass
class Plan:
    recipe_name: str
    spec: ModelSpec
    hardware: HardwareTarget
    backend: str
    jax_mesh: tuple[int, int]
    jax_memory: Memory
    replicated: list[str]  # tunix tensors the chosen mesh replicates over tp (paths)
    tp_issues: list[str]
    jax_options: list[MeshOption]
    torch_devices: int | None  # GPUs per node the torch plan uses (None: not a GPU/CPU target)
    torch_memory: Memory | None
    blockers: list[str] = field(default_factory=list)  # for `backend`
    memory_blockers: list[str] = field(default_factory=list)  # those of `blockers` that are the memory estimate's
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.blockers


def _spec(recipe: Recipe) -> ModelSpec:
    fam = get_family(recipe.model.family)
    try:
        path = model_path(recipe, fetch=False)  # a hub id's cached config; the planner never downloads
    except HubError:
        if not recipe.model.size:
            raise
        path = None
    if path is not None and (path / "config.json").is_file():
        return model_dir_spec(path, fam.name)
    if recipe.model.size:
        return fam.spec(recipe.model.size)
    raise ValueError(f"model.path has no config.json ({path}) and model.size is not set: nothing to plan")


def _group(path: str) -> str:
    """layers.5.attn.k_einsum.w -> attn.k_einsum (the per-layer tensor kind)."""
    parts = path.split(".")
    return ".".join(parts[2:-1]) if parts[0] == "layers" else ".".join(parts[:-1])


def replication_cost_gb(spec: ModelSpec, recipe: Recipe, fsdp: int, tp: int) -> float:
    """Extra GB per device from keeping whole the tensor axes the mesh can't split (base weights in the model
    dtype, LoRA tensors at 16 bytes per parameter with their grads and AdamW state)."""
    mesh = {"fsdp": fsdp, "tp": tp}

    def extra(t) -> float:
        as_specified = t.size / math.prod(mesh[n] for n in t.spec if n is not None)
        return per_device_elements(t, mesh) - as_specified

    base = sum(extra(t) for t in tunix_tensors(spec)) * DTYPE_BYTES[recipe.model.dtype]
    lora = sum(extra(x) for x in trained_lora_tensors(spec, recipe.lora.targets, recipe.lora.rank))
    return (base + lora * 16) / GB


def replicated_tensors(spec: ModelSpec, fsdp: int, tp: int, rank: int | None = None, targets=()) -> list[str]:
    """Paths of the tunix tensors (and LoRA tensors, given a rank) that the mesh can't split on some axis."""
    mesh = {"fsdp": fsdp, "tp": tp}
    tensors = tunix_tensors(spec)
    if rank:
        tensors += trained_lora_tensors(spec, targets, rank)
    return [t.path for t in tensors if fitted(t, mesh)[1]]


def _mesh_options(spec: ModelSpec, recipe: Recipe, hw: HardwareTarget) -> list[MeshOption]:
    n = hw.devices if hw.chip.platform != "cpu" else recipe.backend.jax.mesh.fsdp * recipe.backend.jax.mesh.tp
    options = []
    for tp in (t for t in range(1, n + 1) if n % t == 0):
        fsdp = n // tp
        mem = memory(spec, recipe, hw, fsdp=fsdp, tp=tp, backend="jax")
        groups = sorted({_group(p) for p in replicated_tensors(spec, fsdp, tp)})
        if spec.tp_problems(tp):
            verdict = "needs replication"
        else:
            verdict = "ok" if mem.fits else "out of memory"
        options.append(MeshOption(fsdp, tp, groups, mem, verdict))
    return options


def plan_recipe(recipe: Recipe, backend: str | None = None, spec: ModelSpec | None = None) -> Plan:
    """The plan for `recipe` on its hardware; `blockers` are the reasons `backend` (default: the recipe's) can't
    run it as configured. `spec`: the model's shapes when known (else from model.path or model.size)."""
    backend = backend or recipe.backend.default
    spec, hw = spec or _spec(recipe), HARDWARE[recipe.hardware]
    m = recipe.backend.jax.mesh
    jax_mem = memory(spec, recipe, hw, fsdp=m.fsdp, tp=m.tp, backend="jax")
    tp_issues = spec.tp_problems(m.tp)
    gpu_like = hw.chip.platform in ("gpu", "cpu")
    torch_devices = recipe.backend.torch.devices if gpu_like else None
    torch_mem = (
        memory(spec, recipe, hw, fsdp=1, tp=1, backend="torch", devices=torch_devices) if torch_devices else None
    )
    plan = Plan(
        recipe_name=recipe.name,
        spec=spec,
        hardware=hw,
        backend=backend,
        jax_mesh=(m.fsdp, m.tp),
        jax_memory=jax_mem,
        replicated=replicated_tensors(spec, m.fsdp, m.tp, recipe.lora.rank, recipe.lora.targets),
        tp_issues=tp_issues,
        jax_options=_mesh_options(spec, recipe, hw),
        torch_devices=torch_devices,
        torch_memory=torch_mem,
    )
    (_jax_blockers if backend == "jax" else _torch_blockers)(plan, recipe)
    return plan


SCANNED_MEMORY_NOTE = (
    "backend.jax.scan_layers with nothing recomputed over fsdp > 1: the activations above count what the scan's body "
    "saves per layer (crosstune.planner.scanned), measured on one chip. XLA's total for a scanned step (arguments + "
    "temp_bytes) reads above what its buffers hold at once, on one chip too, where the chip held XLA's peak: the "
    "26B-A4B on v5p-8 (12, 18 and its 30 layers: its recipe) and the E4B on v6e-4 (12) are within 10 % of XLA's peak "
    "(docs/BENCHMARKS.md), no other model is checked: compare with XLA's peak in plan --compile, or recompute "
    "dots_and_attention (splash) or full"
)


def _jax_blockers(plan: Plan, recipe: Recipe) -> None:
    fsdp, tp = plan.jax_mesh
    hw, spec = plan.hardware, plan.spec
    if plan.tp_issues and not recipe.backend.jax.replicate_indivisible_heads:
        ok = [str(o.tp) for o in plan.jax_options if o.verdict != "needs replication"]
        extra = replication_cost_gb(spec, recipe, fsdp, tp)
        plan.blockers.append(
            f"tp={tp} cannot shard {spec.name}: "
            + "; ".join(plan.tp_issues)
            + f". Valid: tp ∈ {{{', '.join(ok)}}}, or tp={tp} with backend.jax.replicate_indivisible_heads: true "
            f"(those heads' weights kept whole on every device: +{extra:.2f} GB per device, "
            f"{plan.jax_memory.total:.1f} GB in all)"
        )
    elif plan.tp_issues:
        plan.notes.append(f"tp={tp}: heads replicated over tp where it can't split them: " + "; ".join(plan.tp_issues))
    if hw.chip.platform != "cpu" and fsdp * tp != hw.devices:
        plan.blockers.append(f"fsdp × tp = {fsdp}×{tp} = {fsdp * tp}, but {hw.name} has {hw.devices} devices")
    # recomputing, a scan holds about what the unrolled step holds (XLA, the 31B on v5p-8 with full remat: 22.35 GB
    # scanned, 22.84 unrolled; with dots_and_attention, tests/planner/test_recompute_modes.py)
    if scan_keeps_every_residual(recipe) and fsdp > 1:
        plan.notes.append(SCANNED_MEMORY_NOTE)
    if not plan.jax_memory.fits:
        plan.memory_blockers.append(oom_message(plan.jax_memory, "device"))
        plan.blockers.append(plan.memory_blockers[-1])


def _torch_blockers(plan: Plan, recipe: Recipe) -> None:
    hw = plan.hardware
    if plan.torch_devices is None:
        plan.blockers.append(f"the torch backend runs on GPUs or CPU; {hw.name} is a {hw.chip.platform.upper()}")
        return
    if hw.chip.platform == "gpu" and plan.torch_devices > hw.devices:
        plan.blockers.append(f"backend.torch.devices={plan.torch_devices} but {hw.name} has {hw.devices} GPUs")
    if plan.torch_memory is not None and not plan.torch_memory.fits:
        plan.memory_blockers.append(oom_message(plan.torch_memory, "GPU"))
        plan.blockers.append(plan.memory_blockers[-1])
