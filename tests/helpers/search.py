"""`plan --search` (crosstune.planner.search) with a stand-in compiler whose figures are known, for
tests/planner/test_search.py: the 31B on a v5p-8, its candidates priced by the planner once."""

from __future__ import annotations

import functools

from crosstune.hardware import HARDWARE
from crosstune.planner import plan_recipe
from crosstune.planner.aot_report import CompiledStep
from crosstune.planner.memory import memory
from crosstune.planner.planned_recipe import load_for_plan
from crosstune.units import GB
from tests.helpers.paths import REPO

G4 = REPO / "recipes" / "gemma4-31b-tpu-v5p-8.yaml"


def step_at(layers: int, **kw) -> CompiledStep:
    """A compiled step at `layers` of the 31B's 60, every figure not given zero (code 1000 bytes)."""
    base = dict(
        topology="v5p:2x2x1",
        device_kind="TPU v5",
        devices=4,
        layers=layers,
        model_layers=60,
        micro_batch_tokens=3072,
        accumulation=8,
        argument_bytes=0,
        output_bytes=0,
        alias_bytes=0,
        temp_bytes=0,
        generated_code_bytes=1000,
        flops=0.0,
        bytes_accessed=0.0,
        build_s=1.0,
        lower_s=1.0,
        compile_s=10.0,
        host_peak_rss_bytes=layers * 10**8,
    )
    return CompiledStep(**{**base, **kw})


def fake_compiler(calls: list, loops_counted: bool = True, base: tuple[str, ...] = (), peaks: bool = False):
    """remat none: 0.8 GB of temporaries per layer and 40 GB more at full depth than the screen's extrapolation
    says; dots 0.5 GB, full 0.05 GB per layer; flops 2.0 / 2.2 / 2.9 e12 per layer. Scanned, cost_analysis counts
    one group of 6 layers (the loop's body once) and the loop's other runs come apart (none in a record from before
    they were counted); XLA compiles for a second per layer unrolled, 10 s scanned. With `peaks`, XLA reports its
    peak, which holds none of those 40 GB (temp_bytes above what the buffers hold, as a scan's are); without, no
    peak (a record from before)."""

    def fake_compile(overrides, layers):
        calls.append((tuple(overrides), layers))
        r = load_for_plan(G4, [*base, *overrides])
        n = layers or 60
        remat = None if not r.train.gradient_checkpointing else r.train.kernels.recompute
        per_layer = {None: 0.8, "dots": 0.5, "full": 0.05}[remat] * GB
        phantom = 40 * GB if remat is None and layers is None else 0
        temp = per_layer * n + phantom
        flops = {None: 2.0, "dots": 2.2, "full": 2.9}[remat] * 1e12
        scan = bool(r.backend.jax.scan_layers)
        body = 6 if scan else n  # layers cost_analysis counts
        return step_at(
            n,
            argument_bytes=round(0.3 * GB * n),
            temp_bytes=round(temp),
            flops=flops * body,
            bytes_accessed=1e10 * body,
            collective_bytes=1e8 * n,
            loop_flops=flops * (n - body) if loops_counted else 0.0,
            loop_bytes=1e10 * (n - body) if loops_counted else 0.0,
            loops_counted=loops_counted,
            scanned=scan,
            compile_s=10.0 if scan else float(n),
            peak_bytes=round(0.3 * GB * n + temp - phantom) + 1000 if peaks else 0,
        )

    return fake_compile


def planner_memory(recipe, base: tuple[str, ...] = ()):
    """The planner's memory of each candidate (plan_recipe's jax_memory, without its other meshes), kept across the
    tests: each search prices every candidate."""
    return lambda c: _priced((*base, *c.overrides(recipe)))


@functools.cache
def _priced(sets: tuple[str, ...]):
    r = load_for_plan(G4, list(sets))
    mesh = r.backend.jax.mesh
    return memory(_spec(), r, HARDWARE[r.hardware], fsdp=mesh.fsdp, tp=mesh.tp, backend="jax")


@functools.cache
def _spec():
    return plan_recipe(load_for_plan(G4), "jax").spec


def rendered_search(found, recipe, hw) -> str:
    """`plan --search`'s tables and lines as the terminal shows them (crosstune.planner.view.render_search)."""
    import io

    from rich.console import Console

    from crosstune.planner.view import render_search

    out = io.StringIO()
    render_search(found, recipe, hw, Console(file=out, width=400))
    return out.getvalue()
