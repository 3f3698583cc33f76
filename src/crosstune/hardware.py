"""Accelerator catalog: bf16 peaks (MFU), HBM (planner) and on-demand prices (cost model).

Prices are third-party on-demand list prices (2025-26); recipes can override them under `cost:`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chip:
    name: str
    platform: str  # "tpu" | "gpu" | "cpu"
    peak_bf16_tflops: float | None  # dense, per chip; None where MFU means nothing (CPU)
    hbm_gb: float | None
    hbm_bandwidth_gbs: float | None
    price_per_chip_hour: float | None


CHIPS: dict[str, Chip] = {
    c.name: c
    for c in (
        Chip("tpu-v5p", "tpu", 459.0, 95.0, 2765.0, 4.20),
        Chip("tpu-v6e", "tpu", 918.0, 32.0, 1638.0, 2.70),
        Chip("tpu-v5e", "tpu", 197.0, 16.0, 819.0, None),
        Chip("h100", "gpu", 989.0, 80.0, 3350.0, 11.06),  # SXM; 1979 is the sparse figure
        Chip("h200", "gpu", 989.0, 141.0, 4800.0, None),
        Chip("a100", "gpu", 312.0, 80.0, 2000.0, None),
        Chip("cpu", "cpu", None, None, None, None),
    )
}


@dataclass(frozen=True)
class HardwareTarget:
    """A named machine shape a recipe runs on."""

    name: str
    chip: Chip
    devices: int  # chips (JAX devices / GPUs); TPU "v5p-8" names TensorCores = 4 chips
    note: str = ""

    @property
    def price_per_hour(self) -> float | None:
        p = self.chip.price_per_chip_hour
        return None if p is None else p * self.devices

    @property
    def peak_tflops(self) -> float | None:
        p = self.chip.peak_bf16_tflops
        return None if p is None else p * self.devices


HARDWARE: dict[str, HardwareTarget] = {
    t.name: t
    for t in (
        HardwareTarget("cpu", CHIPS["cpu"], 1, "this machine; JAX may fake several devices via XLA_FLAGS"),
        HardwareTarget("tpu-v5p-8", CHIPS["tpu-v5p"], 4, "v5p-8 counts TensorCores: 4 chips"),
        HardwareTarget("tpu-v5p-16", CHIPS["tpu-v5p"], 8, "2 hosts"),
        HardwareTarget("tpu-v6e-4", CHIPS["tpu-v6e"], 4),
        HardwareTarget("tpu-v6e-8", CHIPS["tpu-v6e"], 8, "v6e-8 counts chips: 8 chips"),
        HardwareTarget("tpu-v5e-8", CHIPS["tpu-v5e"], 8),
        HardwareTarget("1xh100", CHIPS["h100"], 1),
        HardwareTarget("2xh100", CHIPS["h100"], 2),
        HardwareTarget("8xh100", CHIPS["h100"], 8),
        HardwareTarget("1xh200", CHIPS["h200"], 1),
        HardwareTarget("8xh200", CHIPS["h200"], 8),
        HardwareTarget("1xa100", CHIPS["a100"], 1),
        HardwareTarget("8xa100", CHIPS["a100"], 8),
    )
}


def get_hardware(name: str) -> HardwareTarget:
    try:
        return HARDWARE[name]
    except KeyError:
        raise KeyError(f"unknown hardware {name!r}; known: {', '.join(HARDWARE)}") from None
