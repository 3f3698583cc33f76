"""The jax step's XLA options (crosstune.train.jax.xla_options): TPU devices only, the scoped VMEM the recipe's.
What the options do on TPU devices: test_compile.py's test_each_chip_draws_only_its_shard_of_the_dropout_mask
(slow; libtpu), and docs/BENCHMARKS.md for the chip's times."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest


def test_the_options_are_for_tpu_meshes_only():
    """XLA:CPU has no such options (a compile with them fails there, with XLA's own words), and an empty mesh (no
    devices) gets nothing either."""
    from jax.sharding import Mesh

    from crosstune.train.jax.xla_options import compiler_options

    cpu = Mesh(np.array(jax.devices("cpu")[:1]).reshape(1, 1), ("fsdp", "tp"))
    assert compiler_options(cpu) is None and compiler_options(Mesh(np.empty((0,), object), ("x",))) is None
    for option, value in (("xla_tpu_spmd_rng_bit_generator_unsafe", True), ("xla_tpu_scoped_vmem_limit_kib", 8)):
        with pytest.raises(jax.errors.JaxRuntimeError, match=f"No such compile option: '{option}'"):
            jax.jit(lambda x: x + 1, compiler_options={option: value}).lower(jnp.ones(2)).compile()


def test_the_scoped_vmem_is_the_recipe_s():
    """backend.jax.scoped_vmem_kib goes to XLA as xla_tpu_scoped_vmem_limit_kib beside the dropout's sharded RNG; unset,
    XLA keeps its default (the option is not passed). (Stand-in TPU devices: real ones need libtpu, as in the slow
    test, which compiles with both.)"""
    from crosstune.train.jax.lora_provider import SHARDED_RNG
    from crosstune.train.jax.xla_options import compiler_options

    mesh = SimpleNamespace(empty=False, devices=np.array([SimpleNamespace(platform="tpu", device_kind="TPU v5 lite")]))
    assert compiler_options(mesh) == SHARDED_RNG
    assert compiler_options(mesh, 98304) == {**SHARDED_RNG, "xla_tpu_scoped_vmem_limit_kib": 98304}


def test_a_scoped_vmem_over_the_chip_s_is_refused_by_name():
    """XLA compiles with any value (it took 256 MiB for every kind here), so the step checks the chip's VMEM from
    Pallas' table: 128 MiB on v5e and v6e, 64 on v5p; 96 MiB passes on a v5e and is refused on a v5p."""
    from crosstune.errors import CrosstuneError
    from crosstune.train.jax.xla_options import compiler_options, vmem_kib

    assert (vmem_kib("TPU v5 lite"), vmem_kib("TPU v6 lite"), vmem_kib("TPU v5"), vmem_kib("cpu")) == (
        128 * 1024,
        128 * 1024,
        64 * 1024,
        None,
    )

    def mesh(kind):
        return SimpleNamespace(empty=False, devices=np.array([SimpleNamespace(platform="tpu", device_kind=kind)]))

    assert compiler_options(mesh("TPU v5 lite"), 98304)["xla_tpu_scoped_vmem_limit_kib"] == 98304
    with pytest.raises(CrosstuneError, match="backend.jax.scoped_vmem_kib 98304: a TPU v5 core has 65536 KiB"):
        compiler_options(mesh("TPU v5"), 98304)


def test_the_recipe_bounds_the_scoped_vmem_and_keeps_earlier_hashes():
    """At most a core's 128 MiB; a recipe that doesn't set it dumps as before (its hash unchanged)."""
    from crosstune.recipe.backend_schema import JaxBackendSection

    assert "scoped_vmem_kib" not in JaxBackendSection().model_dump()
    assert JaxBackendSection(scoped_vmem_kib=98304).model_dump()["scoped_vmem_kib"] == 98304
    for bad in (0, 128 * 1024 + 1):
        with pytest.raises(ValueError, match="scoped_vmem_kib"):
            JaxBackendSection(scoped_vmem_kib=bad)
