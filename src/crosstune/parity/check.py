"""Cross-backend parity: the two backends compute the same training step (`crosstune parity RECIPE`).

Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.parity.check"."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from crosstune.data import prepare_dataset
from crosstune.errors import InputError
from crosstune.families import get_family, model_dir_spec
from crosstune.families.base import HF_TARGET_MODULES
from crosstune.families.spec import ModelSpec
from crosstune.recipe import load_recipe, model_path
from crosstune.run.lora_weights import LoraWeights, module_target
from crosstune.train.session import step_probe

LOSS_TOL = 1e-4  # fp32, on a mean cross-entropy of ~7
GRAD_RTOL = 1e-3  # per tensor: max |Δg| <= GRAD_RTOL · max |g| (+ GRAD_ATOL)
GRAD_ATOL = 1e-7
# bf16 keeps 8 significant bits: every rounding is off by up to 2^-8 relative. Both sides round the weights once
# (identically) and then every activation in a different order, so each side's loss is within a few 2^-8 of the
# exact value: the losses must agree within 4 · 2^-8 of the loss (~0.11 nats at 7.2; measured 6.8e-3 on the tiny
# Gemma 4). Gradients are reported, not judged, in bf16: on the tiny models bf16 moves EITHER backend's LoRA
# gradient from its own fp32 value by ~100 % (global relative L2 1.03 torch, 1.02 jax; fp32 torch vs jax: 1.1e-4),
# so per-element agreement is not a property bf16 has. The step's effect is judged through the loss after it.
BF16_EPS = 2.0**-8
BF16_LOSS_RTOL = 4 * BF16_EPS
DROPOUT_SIGMAS = 4.0  # means agree within 4 standard errors of their difference (a false alarm ~1 in 16,000)


@dataclass
class GradDiff:
    module: str
    part: str  # "A" | "B"
    max_abs: float  # max |g_torch - g_jax|
    scale: float  # max |g_torch|
    rtol: float = GRAD_RTOL

    @property
    def ok(self) -> bool:
        return self.max_abs <= GRAD_ATOL + self.rtol * self.scale


@dataclass
class DropoutCheck:
    p: float
    losses: dict[str, list[float]]  # per backend, one loss per dropout draw
    loss_tol: float

    def mean(self, side: str) -> float:
        return float(np.mean(self.losses[side]))

    def sem(self, side: str) -> float:
        x = self.losses[side]
        return float(np.std(x, ddof=1) / math.sqrt(len(x)))

    @property
    def bound(self) -> float:
        return DROPOUT_SIGMAS * math.hypot(self.sem("torch"), self.sem("jax")) + self.loss_tol

    @property
    def ok(self) -> bool:
        active = all(np.std(self.losses[s]) > 0 for s in ("torch", "jax"))
        return active and abs(self.mean("torch") - self.mean("jax")) <= self.bound


@dataclass
class ParityReport:
    family: str
    rows: int
    tokens: dict[str, int]  # trained tokens per backend
    loss: dict[str, float]  # before the step
    loss_after: dict[str, float]
    frozen: int = 0  # gradient elements whose sign the backends disagree on (frozen for the step)
    elements: int = 0  # LoRA parameters in all
    weight_diff: float = 0.0  # max |Δ| of the LoRA weights after the step
    grads: list[GradDiff] = field(default_factory=list)
    precision: str = "fp32"
    accumulation: int = 1
    mesh: tuple[int, int] = (1, 1)
    recompute: dict[str, bool] = field(default_factory=lambda: {"torch": False, "jax": False})
    dropout: DropoutCheck | None = None

    @property
    def loss_tol(self) -> float:
        return LOSS_TOL if self.precision == "fp32" else BF16_LOSS_RTOL * abs(self.loss["torch"])

    @property
    def loss_diff(self) -> float:
        return abs(self.loss["torch"] - self.loss["jax"])

    @property
    def loss_after_diff(self) -> float:
        return abs(self.loss_after["torch"] - self.loss_after["jax"])

    @property
    def ok(self) -> bool:
        return (
            self.tokens["torch"] == self.tokens["jax"]
            and self.recompute["torch"] == self.recompute["jax"]
            and self.loss_diff <= self.loss_tol
            and self.loss_after_diff <= self.loss_tol
            and all(g.ok for g in self.grads)
            and (self.dropout is None or self.dropout.ok)
        )


def parity_lora(spec: ModelSpec, rank: int, alpha: float, targets: list[str], seed: int) -> LoraWeights:
    """Random LoRA weights in the PEFT layout: A ~ N(0, 1/in), B ~ N(0, 0.02²) (non-zero, unlike an init),
    independent for every module (so k and v have different A)."""
    rng = np.random.default_rng(seed)
    fam = get_family(spec.family)
    modules = {}
    for name in fam.hf_lora_modules(spec, targets):
        layer, target = module_target(name)
        out, fan_in = spec.projection_shapes(layer)[target]
        a = (rng.standard_normal((rank, fan_in)) / np.sqrt(fan_in)).astype(np.float32)
        b = (rng.standard_normal((out, rank)) * 0.02).astype(np.float32)
        modules[name] = (a, b)
    present = tuple(t for t in HF_TARGET_MODULES if t in targets)
    return LoraWeights(spec.family, rank, float(alpha), present, modules)


def _load(recipe_file: Path, overrides: list[str], precision: str):
    """The recipe with LoRA dropout 0 and the base in `precision` on both sides (fp32 | bf16)."""
    dtype = {"fp32": "float32", "bf16": "bfloat16"}[precision]
    fixed = ["lora.dropout=0.0", f"model.dtype={dtype}", f"train.precision={precision}"]
    return load_recipe(recipe_file, [*(overrides or []), *fixed])


def run_parity(
    recipe_file: Path,
    overrides: list[str] | None = None,
    seed: int = 0,
    log: Callable[[str], None] = lambda _: None,
    *,
    precision: str = "fp32",
    dropout: float | None = None,
    dropout_samples: int = 8,
) -> ParityReport:
    """Load, step and compare both backends on the recipe (see the module docstring); `log` hears each phase.
    `dropout`: the LoRA dropout of the sampled check (None or 0 skips it: it builds a second jax model)."""
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision {precision!r}: fp32 or bf16")
    recipe = _load(recipe_file, overrides or [], precision)
    base = model_path(recipe)
    if base is None or not (base / "config.json").is_file():
        raise InputError(f"model.path: no HF checkpoint (config.json) at {base}: give an HF model folder")
    spec = model_dir_spec(base, recipe.model.family)
    log("preparing data")
    prepared = prepare_dataset(recipe)
    mesh = recipe.backend.jax.mesh
    rows = recipe.train.per_device_batch_size * mesh.fsdp
    lora = parity_lora(spec, recipe.lora.rank, recipe.lora.alpha, list(recipe.lora.targets), seed)
    bf16 = precision == "bf16"
    log("loading the torch model (TRL + PEFT)")
    torch_side = step_probe(recipe, "torch", prepared, lora, rows, bf16)
    log(f"loading the jax model (Tunix + Qwix, mesh {mesh.fsdp}×{mesh.tp})")
    jax_side = step_probe(recipe, "jax", prepared, lora, rows, bf16)
    log("loss and gradients")
    loss_t, grads_t = torch_side.loss_and_grads()
    loss_j, grads_j = jax_side.loss_and_grads()
    freeze = undetermined_signs(grads_t, grads_j)
    log("one AdamW step")
    after_t, weights_t = torch_side.step(freeze)
    after_j, weights_j = jax_side.step(freeze)
    report = ParityReport(
        recipe.model.family,
        rows,
        tokens={"torch": torch_side.tokens, "jax": jax_side.tokens},
        loss={"torch": loss_t, "jax": loss_j},
        loss_after={"torch": after_t, "jax": after_j},
        frozen=int(sum(f.sum() for pair in freeze.values() for f in pair)),
        elements=int(sum(a.size + b.size for a, b in lora.modules.values())),
        weight_diff=max(float(np.abs(weights_t[m][i] - weights_j[m][i]).max()) for m in lora.modules for i in (0, 1)),
        precision=precision,
        accumulation=torch_side.k,
        mesh=(mesh.fsdp, mesh.tp),
        recompute={"torch": torch_side.recomputes, "jax": jax_side.recomputes},
    )
    rtol = GRAD_RTOL if precision == "fp32" else math.inf  # bf16: reported, not judged (see BF16_LOSS_RTOL)
    for name in lora.modules:
        for part, i in (("A", 0), ("B", 1)):
            gt, gj = grads_t[name][i], grads_j[name][i]
            report.grads.append(GradDiff(name, part, float(np.abs(gt - gj).max()), float(np.abs(gt).max()), rtol))
    if dropout:
        log(f"LoRA dropout {dropout}: {dropout_samples} draws per side")
        report.dropout = DropoutCheck(
            dropout,
            {
                "torch": torch_side.sample_losses(dropout_samples, seed, dropout),
                "jax": jax_side.sample_losses(dropout_samples, seed, dropout),
            },
            report.loss_tol,
        )
    return report


def undetermined_signs(torch_grads: dict, jax_grads: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per module, 1 where the backends' gradient signs disagree (the element is at the noise floor), else 0.

    AdamW's first step moves every element by about lr·sign(g): an element whose sign rounding decides would
    move ±lr depending on the backend. Such elements (typically one in 10⁴-10⁵ in fp32) are frozen on both sides
    for the step; the count is reported."""
    return {
        m: tuple((np.sign(torch_grads[m][i]) != np.sign(jax_grads[m][i])).astype(np.float32) for i in (0, 1))
        for m in torch_grads
    }
