"""The recipe's backend section: which backend a run defaults to, and each backend's own settings (the torch
processes and FSDP; the jax mesh and its step's switches). The one list of backend names lives here."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from crosstune.recipe.section import Section, bounded

BackendName = Literal["torch", "jax"]  # the one list of backends (crosstune.train.backend maps each to its class)
BACKEND_NAMES: tuple[str, ...] = get_args(BackendName)


class TorchBackendSection(Section):
    devices: int = bounded("backend.torch.devices", 1)
    nodes: int = bounded("backend.torch.nodes", 1)
    fsdp: bool = False


class JaxMesh(Section):
    fsdp: int = bounded("backend.jax.mesh.fsdp", 1)
    tp: int = bounded("backend.jax.mesh.tp", 1)


class JaxBackendSection(Section):
    omitted_when_none = ("scoped_vmem_kib", "scan_layers")  # earlier recipes keep their hashes
    mesh: JaxMesh = Field(default_factory=JaxMesh)
    attention: Literal["dense", "splash"] = Field(
        "dense",
        description="dense: tunix's attention over a [rows, L, L] mask (causal, same document; the sliding "
        "band on local layers); splash: jax's Pallas splash kernel with the packed rows' segment ids and the local "
        "window, skipping the blocks the mask rules out (TPU; on CPU it runs in Pallas interpret mode, for tests "
        "only). Needs data.max_seq_len a multiple of min(512, max_seq_len) and of 128 (crosstune.train.jax.attention)",
    )
    splash_block: Literal[128, 256, 512] = Field(
        512,
        description="splash attention's tile (queries and keys per block): the kernel computes every block its "
        "causal or local mask touches, so a smaller tile wastes less of the sliding layers' window edges and the "
        'diagonal, at more blocks\' overhead (docs/BENCHMARKS.md, "TPU v5e chip, measured")',
    )
    splash_fused_backward: bool = Field(
        True,
        description="splash's backward as one pass computing dq with dk and dv (it writes per-block partial "
        "dq, summed after), or two passes (dq apart). On the v5e chip two passes ran the 31B's first 4 layers "
        "0.4 % faster at 112 MiB of scoped VMEM (75.2 % MFU) and within 0.3 % either way at XLA's default "
        "(docs/BENCHMARKS.md)",
    )
    scoped_vmem_kib: int | None = bounded(
        "backend.jax.scoped_vmem_kib",
        None,
        description="TPU only: XLA's scoped VMEM limit (xla_tpu_scoped_vmem_limit_kib), the KiB of a core's vector "
        "memory one op may take, the rest prefetching the ops after it; null: XLA's default. On the v5e chip 98304 "
        "(96 MiB, MaxText's value for dense models) ran the 31B's first 4 layers in 6.1 % less time and the 12B's "
        "first 6 (remat) in 2.6 % more, so it is the recipe's to set; at most the chip's VMEM (128 MiB on v5e and "
        "v6e, 64 on v5p: the step refuses more) (crosstune.train.jax.xla_options, docs/BENCHMARKS.md)",
    )
    scan_layers: bool | None = Field(
        None,
        description="hold the decoder layers stacked, one [groups, ...] array per tensor of a group of one "
        "attention-pattern period (the 31B: 10 groups of 6), and run them as a jax.lax.scan: XLA compiles one "
        "group's body, so compile time stops growing with depth: the 31B's 60 layers for v5p-8 in 85 s in XLA "
        "against 349 unrolled. Measured on the v5e chip: 0-3.5 % slower than unrolled for dense layers (7.9 % "
        "faster for the 26B-A4B's MoE with full remat); without remat it holds far more memory (the 31B: 59.2 GB "
        "per chip against 33.8): check it with `plan --compile`, or let `plan --search` choose "
        '(docs/BENCHMARKS.md, "Compile time"). Checkpoints keep the stacked layout (export reads either). The '
        "Gemma 4 E4B scans in one body (its KV-sharing layers read the K/V the scan carries), the E2B in two "
        "segments: the layers that own their K/V, then those that reuse one's. null/false: the layers unrolled "
        "(crosstune.train.jax.layer_scan)",
    )
    replicate_indivisible_heads: bool = Field(
        False, description="replicate heads that tp can't divide (costs memory) instead of rejecting the mesh"
    )
    cpu_compute_dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="the activations' dtype when the jax backend runs on CPU (on TPU/GPU they follow "
        "train.precision). bfloat16 halves activation and logit memory: what a real-size rehearsal on a CPU box "
        "needs; parity checks and tiny models want float32. Gemma 4 only: tunix's Gemma 3 computes in model.dtype. "
        "The torch backend has no such switch: it loads the base in fp32 on CPU and trains there without autocast",
    )


class BackendSection(Section):
    default: BackendName = "torch"
    torch: TorchBackendSection = Field(default_factory=TorchBackendSection)
    jax: JaxBackendSection = Field(default_factory=JaxBackendSection)
