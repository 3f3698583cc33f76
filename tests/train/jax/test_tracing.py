"""crosstune.train.jax.tracing: a probe of a Tracer's `sharding` or `device` walks none of the equations traced so
far, so building and tracing the step is linear in its depth (the 31B's abstract step at 60 layers: 181 s → 5.5 s
to build on this CPU; docs/BENCHMARKS.md). Counted, not timed: every walk is a call of jax's find_progenitors."""

from __future__ import annotations

import pytest

pytest.importorskip("tunix")


def _walks(monkeypatch) -> list[int]:
    """The calls of jax's trace walk (find_progenitors) from now on, as a list that grows."""
    from jax._src.interpreters import partial_eval as pe

    calls: list[int] = []
    walk = pe.JaxprStackFrame.find_progenitors

    def counted(self, tracer):
        calls.append(1)
        return walk(self, tracer)

    monkeypatch.setattr(pe.JaxprStackFrame, "find_progenitors", counted)
    return calls


def _jax_own_probes(monkeypatch) -> None:
    """Tracer.sharding and .device as jax defines them until the test ends (a process that never built a model)."""
    from jax._src import core

    from crosstune.train.jax.tracing import JAX_OWN

    for name, prop in JAX_OWN.items():
        monkeypatch.setattr(core.Tracer, name, prop)


def test_a_probe_of_a_tracer_s_sharding_walks_nothing_and_other_errors_keep_their_origin(monkeypatch):
    import jax
    import jax.numpy as jnp

    from crosstune.train.jax.tracing import PROBED, linear_tracing, walks_the_trace

    _jax_own_probes(monkeypatch)
    assert linear_tracing() == ["sharding", "device"]  # jax 0.10's own probes walk the trace
    assert linear_tracing() == [] and not any(walks_the_trace(name) for name in PROBED)
    calls, seen = _walks(monkeypatch), {}

    def f(x):
        for _ in range(20):
            x = jnp.sin(x)
        seen["probes"] = (getattr(x, "sharding", None), hasattr(x, "device"), len(calls))
        with pytest.raises(AttributeError, match="The 'sharding' attribute is not available on"):
            _ = x.sharding
        with pytest.raises(jax.errors.ConcretizationTypeError, match="depends on the value of the argument x"):
            _ = x.committed
        return x

    jax.jit(f).lower(jnp.ones(3))
    assert seen["probes"] == (None, False, 0) and len(calls) > 0  # the committed error still walks: it says where


def test_building_a_model_with_lora_and_dropout_walks_no_trace(monkeypatch):
    """Qwix makes the LoRA params (and the dropout's RNG counts) while tracing a forward pass under eval_shape: each
    assignment probed a tracer's sharding, and each probe walked the trace (hundreds of walks at 2 layers before)."""
    import jax
    from flax import nnx

    from crosstune.families import get_family
    from crosstune.families.gemma4.family import make_spec
    from crosstune.recipe.schema import LoraSection
    from crosstune.train.jax.model import abstract_model, make_mesh

    _jax_own_probes(monkeypatch)
    calls = _walks(monkeypatch)
    cfg = get_family("gemma4").hf_config(make_spec("gemma-4-tracing-test", 2, 64, 128, 4, 2, 32, 1, 64, 128, 512))
    lora = LoraSection(rank=4, alpha=8.0, dropout=0.05)
    model, _ = abstract_model("gemma4", cfg, make_mesh(1, 1), lora=lora, platform="cpu")
    lora_leaves = jax.tree.leaves(nnx.state(model, nnx.LoRAParam))
    assert len(lora_leaves) == 2 * 6 * 2 and calls == []  # 2 layers × 6 modules (k, v: one einsum) × A, B


def test_inside_jax_own_probes_a_probe_walks_the_trace_again(monkeypatch):
    """bench/trace_time.py's baseline: jax's own probes inside, crosstune's after."""
    import jax
    import jax.numpy as jnp

    from crosstune.train.jax.tracing import jax_own_probes, linear_tracing, walks_the_trace

    linear_tracing()
    calls = _walks(monkeypatch)

    def probe(x):
        getattr(jnp.sin(x), "sharding", None)
        return x

    with jax_own_probes():
        assert walks_the_trace("sharding") and linear_tracing() == []
        jax.jit(probe).lower(jnp.ones(3))
        inside = len(calls)
    jax.jit(probe).lower(jnp.ones(2))
    assert inside > 0 and len(calls) == inside and not walks_the_trace("sharding")
