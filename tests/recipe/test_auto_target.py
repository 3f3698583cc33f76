"""`hardware: auto` (crosstune.recipe.auto_target, crosstune.hardware.attached_target): the target of the devices this
process sees, its jax mesh fitted to them, each change a warning; the one-chip targets compile for their topology."""

from __future__ import annotations

import pytest

from crosstune.hardware import HARDWARE, NoTarget, attached_target, target_for
from crosstune.recipe import load_recipe
from crosstune.recipe.auto_target import fitted_tp
from tests.helpers import paths

TINY = paths.RECIPES / "tiny-cpu.yaml"  # mesh fsdp 1 × tp 2; the tiny Gemma 4 has 4 heads, 2 KV heads


@pytest.mark.parametrize(
    ("accelerator", "target", "mesh"),
    [
        ("v5litepod-1", "tpu-v5e-1", (1, 1)),
        ("v5litepod-4", "tpu-v5e-4", (2, 2)),
        ("v6e-1", "tpu-v6e-1", (1, 1)),
        ("v5p-8", "tpu-v5p-8", (2, 2)),
        ("v6e-8", "tpu-v6e-8", (4, 2)),
    ],
)
def test_a_slice_s_accelerator_type_names_the_target_and_the_mesh_follows(monkeypatch, accelerator, target, mesh):
    """On a slice of several hosts the TPU runtime's TPU_ACCELERATOR_TYPE names the whole slice (read before
    jax.distributed opens any device)."""
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", accelerator)
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "w0,w1")
    recipe = load_recipe(TINY, ["hardware=auto"])
    m = recipe.backend.jax.mesh
    assert (recipe.hardware, (m.fsdp, m.tp)) == (target, mesh)
    said = {w.path: w.message for w in recipe.warnings if w.path in ("hardware", "backend.jax.mesh")}
    assert said["hardware"].startswith(f"auto: the attached devices are {target}")
    fitted = f"fsdp × tp 1 × 2 → {mesh[0]} × {mesh[1]} for the"
    assert said.get("backend.jax.mesh", fitted).startswith(fitted) and ("backend.jax.mesh" in said) == (mesh != (1, 2))


def test_on_one_host_auto_is_what_jax_sees_whatever_the_host_s_accelerator_type(monkeypatch):
    """A one-chip sandbox of a v5litepod-4 host says v5litepod-4 and shows one chip: on one host JAX's devices
    decide (here: this CPU, the mesh kept)."""
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "localhost")
    recipe = load_recipe(TINY, ["hardware=auto"])
    assert recipe.hardware == "cpu" and (recipe.backend.jax.mesh.fsdp, recipe.backend.jax.mesh.tp) == (1, 2)


def test_a_named_target_is_kept():
    assert load_recipe(TINY).hardware == "cpu"
    assert load_recipe(TINY, ["hardware=tpu-v5e-8", "backend.jax.mesh.fsdp=4"]).hardware == "tpu-v5e-8"


def test_the_mesh_keeps_tp_where_it_fits_else_takes_the_largest_that_splits_the_heads():
    assert fitted_tp(2, 8, [1, 2, 4]) == 2
    assert fitted_tp(4, 2, [1, 2, 4]) == 2
    assert fitted_tp(8, 8, [1, 2, 4]) == 4
    assert fitted_tp(2, 1, [1, 2]) == 1


def test_a_slice_the_catalog_lacks_is_refused_by_name(monkeypatch):
    with pytest.raises(NoTarget, match=r"3 × tpu-v5e would be 'tpu-v5e-3'.*known: tpu-v5e-1, tpu-v5e-4, tpu-v5e-8"):
        target_for("tpu-v5e", 3)
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-16")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "w0,w1,w2,w3")
    with pytest.raises(NoTarget, match="tpu-v5e-16"):
        attached_target()


def test_one_chip_targets_have_a_topology_and_the_v5e_s_measured_limit():
    for name in ("tpu-v5e-1", "tpu-v6e-1"):
        assert HARDWARE[name].devices == 1 and HARDWARE[name].tpu_topology[1] == (1, 1, 1)
    assert HARDWARE["tpu-v5e-1"].chip.xla_bytes_limit == 16_909_336_064  # bytes_limit read on the chip
