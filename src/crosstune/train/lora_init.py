"""The initial LoRA of a run, the same on both backends by construction.

One seeded draw in the backend-neutral PEFT layout (crosstune.run.lora_weights): every adapted HF module gets
its own A ~ U(±1/sqrt(fan_in)) — PEFT's default, kaiming_uniform(a=√5) — and B = 0 (standard LoRA: step 0 is the
base model). Each module's generator is seeded by (seed, crc32(module name)), so the draw of a module depends on
neither the layer count nor the order of iteration. The torch backend copies these arrays into PEFT's lora_A/lora_B;
the JAX backend installs them through crosstune.train.jax.lora.install_lora, which holds a fused k/v (or q/k/v)
einsum as the exact rank-c·r block LoRA, so k and v keep separate A matrices there too.
"""

from __future__ import annotations

import math
import zlib

import numpy as np

from crosstune.families import get_family
from crosstune.families.base import HF_TARGET_MODULES
from crosstune.families.spec import ModelSpec
from crosstune.run.lora_weights import LoraWeights, module_target


def initial_lora(
    spec: ModelSpec, rank: int, alpha: float, targets: list[str] | tuple[str, ...], seed: int
) -> LoraWeights:
    """A ~ U(±1/sqrt(fan_in)), B = 0, float32, for every module the family adapts for `targets` on `spec`."""
    modules = {}
    for name in get_family(spec.family).hf_lora_modules(spec, list(targets)):
        layer, target = module_target(name)
        out, fan_in = spec.projection_shapes(layer)[target]
        bound = 1.0 / math.sqrt(fan_in)
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        a = rng.uniform(-bound, bound, size=(rank, fan_in)).astype(np.float32)
        modules[name] = (a, np.zeros((out, rank), np.float32))
    present = tuple(t for t in HF_TARGET_MODULES if t in targets)
    return LoraWeights(spec.family, rank, float(alpha), present, modules)


def lora_differences(a: LoraWeights, b: LoraWeights) -> list[str]:
    """Where two LoRA states differ (module sets, shapes, any element): empty when they are identical."""
    problems = []
    if (a.rank, a.alpha) != (b.rank, b.alpha):
        problems.append(f"rank/alpha {a.rank}/{a.alpha} vs {b.rank}/{b.alpha}")
    for name in sorted(set(a.modules) ^ set(b.modules)):
        problems.append(f"{name}: only in {'the first' if name in a.modules else 'the second'}")
    for name in sorted(set(a.modules) & set(b.modules)):
        for part, x, y in zip("AB", a.modules[name], b.modules[name], strict=True):
            if x.shape != y.shape:
                problems.append(f"{name}.lora_{part}: shape {x.shape} vs {y.shape}")
            elif not np.array_equal(x, y):
                problems.append(f"{name}.lora_{part}: max |Δ| {float(np.abs(x - y).max()):.3g}")
    return problems
