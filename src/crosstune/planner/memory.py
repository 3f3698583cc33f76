"""Per-device memory of one mesh for the jax step, or of one FSDP group of GPUs for the torch one: the weights, the
LoRA state, the weights XLA holds gathered over fsdp, the activations each recompute policy keeps (a scan's too:
crosstune.planner.scanned) and the loss's buffers; `memory(...) -> Memory`, used by crosstune.planner.estimate's
plan. Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.planner.estimate and crosstune.planner.memory"."""

from __future__ import annotations

from dataclasses import dataclass

from crosstune.families.spec import DTYPE_BYTES, ModelSpec
from crosstune.hardware import HardwareTarget
from crosstune.planner.activations import (
    kept_in_working_set,
    layer_working_set,
    logits_bytes,
    saved_attention,
    saved_matmuls,
    splash_residuals,
)
from crosstune.planner.scanned import scan_residuals
from crosstune.planner.tensors import per_device_elements, trained_lora_tensors, tunix_tensors
from crosstune.recipe import Recipe
from crosstune.units import GB

# The tunix experts' weights (families/gemma4/tunix.py: [E, 2, X, D] gate/up and [E, X, D] down per MoE layer), and
# how many layers' worth of them, gathered over fsdp, XLA keeps live at once (see jax_memory's gathered term).
EXPERT_WEIGHTS = (".moe.gating_einsum", ".moe.linear")
EXPERT_LAYERS_LIVE = 1


@dataclass
class Memory:
    """Per-device estimate, GB (crosstune.units: as chips publish their HBM)."""

    base: float
    lora: float  # LoRA params + grads + AdamW state
    activations: float  # as the recipe runs (remat or not)
    activations_no_remat: float
    activations_remat: float
    logits: float
    hbm: float | None
    usable: float | None  # what a program may hold (crosstune.hardware.Chip.usable_gb)
    activations_selective: float | None = None  # torch only: remat + the kept attention outputs
    gathered: float = 0.0  # jax with fsdp > 1: the decoder layers' weights all-gathered over fsdp, held to backward
    # the part of the activations alive while the loss runs; None: all of them. Under jax's full remat the loss runs
    # before any layer's recompute, so the peak is the larger of the two phases, not their sum
    held_through_loss: float | None = None
    # one layer's backward at a time after the loss, beside all the activations, so the peak holds the larger of it
    # and the loss: a scan's backward loop with nothing recomputed (crosstune.planner.scanned), and under dots or
    # dots_and_attention, scanned or not, a layer's recompute of what the policy doesn't keep (docs/DESIGN_NOTES.md)
    backward_iteration: float | None = None

    @property
    def total(self) -> float:
        if self.backward_iteration is not None:
            return self.base + self.lora + self.gathered + self.activations + max(self.logits, self.backward_iteration)
        if self.held_through_loss is None:
            return self.base + self.lora + self.gathered + self.activations + self.logits
        peak = max(self.activations, self.held_through_loss + self.logits)
        return self.base + self.lora + self.gathered + peak

    @property
    def fits(self) -> bool:
        return self.usable is None or self.total <= self.usable


def _gathered(spec: ModelSpec, fsdp: int, tp: int, a: int, one_group: bool) -> float:
    """Bytes per device of the weights XLA holds gathered over fsdp (none at fsdp 1). Measured by XLA:TPU's compiler
    only (no GPU compile here: GPUs keep the old estimate)."""
    if fsdp == 1:
        return 0.0
    # XLA keeps every decoder layer's weights, gathered over fsdp in the forward pass, alive until that layer's
    # backward (measured: Gemma 3 27B on v6e-8 at fsdp 2 × tp 4, XLA's temp grows by one layer's fsdp-gathered
    # weights per layer, 0.21 GB; docs/BENCHMARKS.md, "Ahead-of-time TPU compile"), and the LM head's embedding
    # while the loss runs (the E4B on v6e-4's buffer assignment: bf16[131072, 2560], the vocabulary still over tp).
    # Scanned (backend.jax.scan_layers) under a recompute policy (`one_group`), a loop's body gathers its group's
    # weights and the backward's recompute gathers them again: one group's are held at a time, beside the layers
    # after the whole groups (unrolled). XLA's peak at full depth (2026-12-07, stop 65; docs/BENCHMARKS.md, "Scanned
    # over fsdp"): the 12B on v6e-4 (full remat) 11.81 GB against 11.80 so counted (21.35 with every layer's), the
    # E4B on v6e-4 (dots_and_attention) 15.14 against 15.01 (18.44). Scanned with nothing recomputed, XLA's peak
    # grows per group as if every layer's were held, as unrolled (the 26B-A4B on v5p-8, 12 -> 18 layers:
    # tests/planner/test_scanned_peak.py; which of XLA's buffers hold them is not traced).
    gathered_mesh = {"fsdp": 1, "tp": tp}
    tensors = tunix_tensors(spec)
    layers = [t for t in tensors if t.path.startswith("layers.")]
    experts = [t for t in layers if t.path.endswith(EXPERT_WEIGHTS)]
    head = [t for t in tensors if t.shape == (spec.vocab_size, spec.hidden_size)]  # the tied LM head's [V, D]
    per_layer = [0.0] * spec.num_layers
    for t in layers:
        if not t.path.endswith(EXPERT_WEIGHTS):
            per_layer[int(t.path.split(".")[1])] += per_device_elements(t, gathered_mesh) * a
    gathered = sum(per_device_elements(t, gathered_mesh) for t in head) * a
    if one_group:
        p = spec.scan_period
        whole = spec.num_layers // p * p
        gathered += max(sum(per_layer[g : g + p]) for g in range(0, whole, p)) + sum(per_layer[whole:])
    else:
        gathered += sum(per_layer)
    if experts:
        # The experts' weights are gathered over fsdp where a layer runs and not held to its backward: XLA's
        # temp for the 26B-A4B on v5p-8 (fsdp 2 × tp 2) grows 0.18-0.20 GB per layer (6, 12 and 30 layers:
        # 3.65, 4.86, 8.04 GB), not the 0.76 GB of a layer's gathered experts. Its buffers hold the gathered
        # experts of about EXPERT_LAYERS_LIVE layers at a time (fitted to the remat-off compiles at 6, 12 and 30
        # layers, whose temp is within 5 % at each depth; docs/BENCHMARKS.md).
        layers = _expert_layers(spec, tp, a)
        gathered += min(EXPERT_LAYERS_LIVE, len(layers)) * max(layers.values())
    return gathered


def _expert(t) -> bool:
    return t.path.startswith("layers.") and t.path.endswith(EXPERT_WEIGHTS)


def _expert_layers(spec: ModelSpec, tp: int, a: int) -> dict[str, float]:
    """Bytes per device of each MoE layer's experts gathered over fsdp (still split over tp), by layer."""
    per_layer: dict[str, float] = {}
    for t in tunix_tensors(spec):
        if _expert(t):
            layer = t.path.split(".")[1]
            per_layer[layer] = per_layer.get(layer, 0.0) + per_device_elements(t, {"fsdp": 1, "tp": tp}) * a
    return per_layer


def scan_keeps_every_residual(recipe: Recipe) -> bool:
    """Whether the jax step runs its layers as a scan with nothing recomputed: the scan's body then saves every
    residual of every group for the backward's loop (crosstune.planner.scanned), and holds every layer's weights
    gathered over fsdp as unrolled (_gathered); under a recompute policy it holds one group's."""
    return bool(recipe.backend.jax.scan_layers) and not recipe.train.gradient_checkpointing


def scan_slices_experts(fsdp: int) -> bool:
    """Whether a scanned MoE layer takes its own experts out of the stack first (crosstune.train.jax.moe.hold_whole's
    `sliced_experts`: where the mesh splits the experts along E). Tunix shards the experts' E over fsdp
    (exp_weight_edf = (fsdp, ...)), so wherever fsdp > 1; elsewhere it reads the stack whole."""
    return fsdp > 1


def _second_layout(spec: ModelSpec, mesh: dict, a: int) -> float:
    """Bytes per device of the experts held a second time: a scanned MoE keeps both layouts ragged_dot reads, the
    backward's beside the forward's, and transposes nothing (crosstune.train.jax.moe.WholeMoE). The 26B-A4B's 2
    layers at 4096 tokens on the v5e chip: 13.19 GB against 7.80 unrolled (2026-12-07, stop 63)."""
    return sum(per_device_elements(t, mesh) for t in tunix_tensors(spec) if _expert(t)) * a


def memory(
    spec: ModelSpec, recipe: Recipe, hw: HardwareTarget, *, fsdp: int, tp: int, backend: str, devices: int = 1
) -> Memory:
    """Per-device memory of one mesh (JAX: fsdp × tp) or one FSDP group of `devices` GPUs (torch)."""
    a = DTYPE_BYTES[recipe.model.dtype]
    if backend == "torch" and hw.chip.platform == "cpu":
        a = DTYPE_BYTES["float32"]  # the torch backend loads and trains in fp32 without a GPU (train/torch/model.py)
    b, seq = recipe.train.per_device_batch_size, recipe.data.max_seq_len
    mesh = {"fsdp": fsdp, "tp": tp}
    rank = recipe.lora.rank
    if backend == "jax":
        base = sum(per_device_elements(t, mesh) for t in tunix_tensors(spec)) * a
        lora_elements = sum(per_device_elements(x, mesh) for x in trained_lora_tensors(spec, recipe.lora.targets, rank))
        lora = lora_elements * 16
        one_group = bool(recipe.backend.jax.scan_layers) and not scan_keeps_every_residual(recipe)
        tpu = hw.chip.platform == "tpu"  # measured by XLA:TPU's compiles only
        gathered = _gathered(spec, fsdp, tp, a, one_group) if tpu else 0.0
    else:
        gathered = 0.0
        shards = devices if recipe.backend.torch.fsdp else 1
        layer = max(spec.layer_params(i) for i in range(spec.num_layers))
        base = spec.total_params * a / shards + (2 * layer * a if shards > 1 else 0)
        lora = spec.lora_params(rank, recipe.lora.targets) * 16 / shards
    splash = backend == "jax" and recipe.backend.jax.attention == "splash"
    scores = backend == "jax" and not splash  # tunix's dense attention holds fp32 scores and probabilities
    # XLA keeps 3 [tokens, F/tp] MLP tensors per layer (gate, up, their product): the 31B's full-depth compile with
    # nothing recomputed, splash, v5p-8 (temp 13.17 GB; docs/BENCHMARKS.md); the torch estimate keeps its 4
    mlp = 3 if backend == "jax" else 4
    working = [layer_working_set(spec, i, b, seq, a, tp, scores, mlp) for i in range(spec.num_layers)]
    if splash:  # the kernel's residuals instead: its output and fp32 logsumexp per layer
        working = [w + splash_residuals(spec, i, b, seq, a, tp) for i, w in enumerate(working)]
    mask = 0 if splash else b * seq * seq  # the [b, L, L] boolean mask (splash takes [b, L] segment ids)
    no_remat = sum(working) + mask
    residual = spec.num_layers * b * seq * spec.hidden_size / tp * a
    remat = residual + max(working) + mask
    logits = logits_bytes(spec, b, seq, tp, backend)
    selective = remat + saved_attention(spec, b, seq, a) if backend == "torch" else None
    acts = remat if recipe.train.gradient_checkpointing else no_remat
    if selective is not None and recipe.train.gradient_checkpointing and not recipe.train.kernels.recomputes_attention:
        acts = selective
    kept_matmuls = recipe.train.gradient_checkpointing and not recipe.train.kernels.recomputes_matmuls
    full_remat = backend == "jax" and recipe.train.gradient_checkpointing and recipe.train.kernels.recompute == "full"
    scanned = backend == "jax" and recipe.backend.jax.scan_layers and not full_remat
    iteration = None
    if backend == "jax" and kept_matmuls:  # dots, dots_and_attention (+ splash's residuals: the recipe needs splash)
        lora_targets = tuple(recipe.lora.targets)
        acts = sum(saved_matmuls(spec, i, b, seq, a, tp, lora_targets) for i in range(spec.num_layers)) + residual
        if not recipe.train.kernels.recomputes_attention:
            acts += sum(splash_residuals(spec, i, b, seq, a, tp) for i in range(spec.num_layers))
        acts += mask
        # what a layer's backward recomputes (its working set but what the policy keeps) runs after the loss, as
        # a scan's backward iteration does (Memory.backward_iteration): the larger of the two, not their sum
        iteration = max(w - kept_in_working_set(spec, i, b, seq, a, tp) for i, w in enumerate(working))
    if backend == "jax" and scan_keeps_every_residual(recipe):  # every residual the scan's body names, stacked
        targets, dropout = tuple(recipe.lora.targets), recipe.lora.dropout > 0
        acts = sum(scan_residuals(spec, i, b, seq, a, tp, targets, dropout) for i in range(spec.num_layers)) + mask
        iteration = max(working)
    if backend == "jax" and recipe.backend.jax.scan_layers and spec.moe is not None:
        base += _second_layout(spec, mesh, a)
        if scanned and iteration is not None and scan_slices_experts(fsdp):  # each layer's backward
            iteration += max(_expert_layers(spec, tp, a).values()) / fsdp  # copies its own out of the device's shard
    # jax's full remat keeps only the layers' inputs through the loss: the 12B's 6 layers on the v5e chip held 6.75 GB
    # (XLA's plan 7.02), the sum of both phases said 8.01 (docs/BENCHMARKS.md)
    return Memory(
        base / GB,
        lora / GB,
        acts / GB,
        no_remat / GB,
        remat / GB,
        logits / GB,
        hw.chip.hbm_gb,
        hw.chip.usable_gb,
        None if selective is None else selective / GB,
        gathered / GB,
        residual / GB if full_remat else None,
        None if iteration is None else iteration / GB,
    )


def oom_message(mem: Memory, unit: str) -> str:
    return (
        f"estimated {mem.total:.1f} GB per {unit} > the {mem.usable:.1f} GB a program may hold of {mem.hbm:.0f} GB HBM "
        f"(base {mem.base:.1f}, LoRA+optimizer {mem.lora:.1f}, "
        + (f"fsdp-gathered layers {mem.gathered:.1f}, " if mem.gathered else "")
        + f"activations {mem.activations:.1f}, "
        f"logits {mem.logits:.1f}"
        + (")" if mem.held_through_loss is None and mem.backward_iteration is None else "")
        + ("" if mem.held_through_loss is None else "; the loss and a layer's recompute at different times)")
        + (
            ""
            if mem.backward_iteration is None
            else f"; the larger of it and a layer's backward, {mem.backward_iteration:.1f})"
        )
    )
