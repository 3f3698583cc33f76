"""Tracing a deep model in time linear in its depth.

A jax Tracer's `sharding` and `device` raise AttributeError (so that `hasattr`/`getattr` probes work), and jax 0.10's
message for it walks every equation traced so far (`Tracer._origin_msg`, `find_progenitors`). flax NNX's
`Variable.set_value` probes `getattr(value, "sharding", None)` on every assignment: each LoRA parameter made under
`nnx.eval_shape`, each dropout draw's RNG count. So tracing the step grew with the square of its depth: building the
31B's abstract step took 2.5 s at 6 layers, 8.5 s at 12 and 181 s at 60 on this project's CPU (docs/BENCHMARKS.md,
"Compile time and a cached restart"). jax-ml/jax#40041 drops that part of the message upstream (a Gemma 3 27B
without a layer scan was "prohibitively slow to trace"); until the pinned jax has it, `linear_tracing()` installs
the same two properties. It checks jax's own source first, so with a jax that has the fix it changes nothing.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

from jax._src import core

PROBED = ("sharding", "device")  # the attributes hasattr/getattr probes reach: AttributeError, not a jax error
JAX_OWN = {name: getattr(core.Tracer, name) for name in PROBED}  # as jax defines them (a test puts them back)


def _cheap(name: str) -> property:
    def raise_(self):
        raise AttributeError(f"The {name!r} attribute is not available on {self._error_repr()}.")

    return property(raise_)


def walks_the_trace(name: str) -> bool:
    """Whether a probe of the Tracer's attribute `name` walks the equations traced so far (jax's own source; a jax
    installed without its sources is taken to: the replacement is harmless there)."""
    try:
        return "_origin_msg" in inspect.getsource(getattr(core.Tracer, name).fget)
    except (OSError, TypeError):
        return True


def linear_tracing() -> list[str]:
    """Make a probe of a Tracer's `sharding` or `device` cost O(1) (idempotent); the attributes it replaced."""
    replaced = [name for name in PROBED if walks_the_trace(name)]
    for name in replaced:
        setattr(core.Tracer, name, _cheap(name))
    return replaced


@contextlib.contextmanager
def jax_own_probes() -> Iterator[None]:
    """Inside: jax's own Tracer.sharding and .device, and linear_tracing() replaces nothing (the baseline of
    bench/trace_time.py); after: as before."""
    global PROBED
    kept, probed = {name: getattr(core.Tracer, name) for name in JAX_OWN}, PROBED
    PROBED = ()
    for name, prop in JAX_OWN.items():
        setattr(core.Tracer, name, prop)
    try:
        yield
    finally:
        PROBED = probed
        for name, prop in kept.items():
            setattr(core.Tracer, name, prop)
