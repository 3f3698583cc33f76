"""The XLA options the jax step is compiled with on TPU devices (compile-only ones too); none elsewhere, since XLA:CPU
rejects options it does not know ("No such compile option").

- `SHARDED_RNG` (crosstune.train.jax.lora_provider): the LoRA dropout's draws sharded like the masks they make.
- The recipe's `backend.jax.scoped_vmem_kib`, where set: how much of a TensorCore's vector memory (VMEM) one HLO op
  may take; XLA keeps the rest for prefetching the ops after it. On the v5e chip 96 MiB (MaxText's value for dense
  models) ran the 31B's first 4 layers at 4096 tokens in 0.3771 s per micro-step (74.8 % MFU; 112 MiB 0.3766 s,
  74.9 %) against 0.4016 s (70.3 %) with XLA's default, peak HBM 12.76 GB against 12.71; the 12B's first 6 layers
  (remat, 32-bit draws then) in 0.3174 s against 0.3094 s: faster on one shape, slower on another, so the recipe sets
  it, measured with `plan --run` (docs/BENCHMARKS.md, "XLA's scoped VMEM").
"""

from __future__ import annotations

from crosstune.errors import CrosstuneError
from crosstune.train.jax.lora_provider import SHARDED_RNG

SCOPED_VMEM = "xla_tpu_scoped_vmem_limit_kib"  # XLA:TPU's option that backend.jax.scoped_vmem_kib sets


def compiler_options(mesh, scoped_vmem_kib: int | None = None) -> dict[str, bool | int] | None:
    """The step's XLA options on `mesh`: SHARDED_RNG, and the scoped VMEM when given, on TPU devices; else none. A
    scoped VMEM over the chip's own is refused here: XLA takes any value when it compiles."""
    if mesh.empty or mesh.devices.flat[0].platform != "tpu":
        return None
    if scoped_vmem_kib is None:
        return SHARDED_RNG
    kind = mesh.devices.flat[0].device_kind
    capacity = vmem_kib(kind)
    if capacity is not None and scoped_vmem_kib > capacity:
        raise CrosstuneError(
            f"backend.jax.scoped_vmem_kib {scoped_vmem_kib}: a {kind} core has {capacity} KiB of VMEM; "
            f"set at most {capacity}, or leave it unset for XLA's default"
        )
    return {**SHARDED_RNG, SCOPED_VMEM: scoped_vmem_kib}


def vmem_kib(device_kind: str) -> int | None:
    """A TensorCore's VMEM in KiB for a JAX device kind, from Pallas' own table of TPU generations (None: a kind the
    table doesn't know). jax names the kind→generation map privately; this is its one use here."""
    from jax._src.pallas.mosaic.tpu_info import chip_version_from_device_kind
    from jax.experimental.pallas import tpu as pltpu

    version = chip_version_from_device_kind(device_kind)
    return None if version is None else pltpu.get_tpu_info_for_chip(version, 1).vmem_capacity_bytes // 1024
