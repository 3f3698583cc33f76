"""One declarative HF <-> Tunix table per family, and the views every other module derives from it.

A family folder (`families/<name>/tunix.py`) lists its tunix parameters as `TunixParam` rows: the tunix path, the
HF tensors it is built from (the fused parts, in order), its shape in axis letters, tunix's default (fsdp, tp)
sharding, how the HF tensors become it, and the neutral LoRA targets it carries. The planner's tensor list, the
tunix LoRA module names, the fused/single LoRA maps of `lora_layout` and the checkpoint loader's builders are all
read off these rows (docs/TUNIX_LAYOUT.md has the layouts with their numerical checks).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crosstune.errors import CrosstuneError
from crosstune.families.spec import AttentionKind, ModelSpec

Spec = tuple[str | None, ...]

# Axis letters of a row's shape: V vocab, D hidden, F the layer's dense MLP width, N heads, K KV heads, H head_dim,
# L layers, P per-layer input width, E experts, X expert width, 1 one; digits 2 and 3 are the fused-parts axis of
# kv/qkv einsums (and of the experts' fused gate/up).
AXES = "VDFNKHLPEX123"

# Layer features a row can depend on (`TunixParam.when`): rows of per-layer inputs or of the MoE block exist only
# in models that have them.
FEATURES = ("per_layer_input", "moe")

# Attention layouts tunix chooses per layer type (rule in `attention_layout`); a row with layout None is on every
# layer of its scope.
LAYOUTS = ("q_kv", "qkv", "q_k")

# How HF tensors (in `TunixParam.hf` order) become the tunix parameter ("transpose": the last two axes swapped,
# then reshaped to the row's shape).
CONVERSIONS = ("copy", "heads", "o_proj", "transpose", "reshape")


def implied_hf_shape(convert: str, shape: str) -> tuple[str, ...] | None:
    """The HF tensors' shape a conversion implies for a tunix `shape` (the inverse of tunix_weights.tunix_tensor), as
    groups of axis letters whose sizes multiply; None for a reshape, which implies none. A transpose implies a
    Linear's 2-D weight; a row whose HF tensor is 3-D (the experts') names its shape (`TunixParam.hf_shape`)."""
    if convert == "copy":
        return tuple(shape)
    if convert == "heads":  # each part (N·H, D): the fused-parts digit dropped
        heads, d, h = shape.lstrip("23")
        return (heads + h, d)
    if convert == "o_proj":  # (D, N·H)
        return (shape[2], shape[:2])
    if convert == "transpose":  # a Linear's [out, in], tunix's [in, out...]
        return (shape[1:], shape[0])
    return None


class UnsupportedConfig(CrosstuneError, ValueError):
    """A config.json field that tunix's model can't reproduce exactly."""


def layer_types(cfg: dict[str, Any]) -> list[str]:
    """HF `layer_types` of a text config (Gemma's 5 sliding : 1 global pattern when absent)."""
    n = cfg["num_hidden_layers"]
    return cfg.get("layer_types") or ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]


@dataclass(frozen=True)
class TunixParam:
    """One row of a family's HF <-> Tunix table."""

    path: str  # tunix path, within `layers.<i>.` when `per_layer`
    hf: tuple[str, ...]  # HF tensor names (within `layers.<i>.` when `per_layer`), the fused parts in order
    shape: str  # axis letters (AXES)
    sharding: Spec  # tunix's default PartitionSpec
    convert: str  # CONVERSIONS
    lora: tuple[str, ...] = ()  # neutral targets its LoRA covers, in fused-parts order (empty: no LoRA)
    contracting: tuple[int, ...] = ()  # axes a Qwix LoRA A takes (the einsum's contracted axes)
    layout: str | None = None  # attention layout it belongs to (LAYOUTS); None: every layer
    per_layer: bool = True
    one_head_unsplit: bool = False  # tunix keeps the KV-head axis whole when there is a single KV head
    when: str | None = None  # a layer feature (FEATURES) the row needs; None: every model has it
    # A K/V parameter tunix builds on every layer but never reads on KV-shared ones, where HF has no tensor: the
    # loader fills it with zeros there.
    kv_owner_only: bool = False
    # The shape of each HF part as groups of axis letters whose sizes multiply ("LP": L·P); None: what the conversion
    # implies (`implied_hf_shape`)
    hf_shape: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if set(self.shape) - set(AXES) or self.convert not in CONVERSIONS or self.layout not in (None, *LAYOUTS):
            raise ValueError(
                f"tunix table row {self.path!r}: shape {self.shape!r}, convert {self.convert!r}, "
                f"layout {self.layout!r} outside {AXES!r}, {CONVERSIONS}, {LAYOUTS}"
            )
        if self.when not in (None, *FEATURES):
            raise ValueError(f"tunix table row {self.path!r}: when {self.when!r} outside {FEATURES}")
        if len(self.sharding) != len(self.shape) or bool(self.lora) != bool(self.contracting):
            raise ValueError(f"tunix table row {self.path!r}: sharding or LoRA axes don't fit shape {self.shape!r}")
        hf = self.hf_shape or implied_hf_shape(self.convert, self.shape)
        if hf is None or set("".join(hf)) - set(AXES):
            raise ValueError(f"tunix table row {self.path!r}: HF shape {hf!r}: give hf_shape in axis letters ({AXES})")

    @property
    def module(self) -> str:
        """The tunix module that owns the parameter (`attn.q_einsum` for `attn.q_einsum.w`)."""
        return self.path.rsplit(".", 1)[0]

    @property
    def weight(self) -> str:
        return self.path.rsplit(".", 1)[1]

    @property
    def fused(self) -> bool:
        return len(self.lora) > 1

    def dims(self, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(int(a) if a.isdigit() else sizes[a] for a in self.shape)

    @property
    def hf_axes(self) -> tuple[str, ...]:
        """The HF parts' shape in axis-letter groups."""
        return self.hf_shape or implied_hf_shape(self.convert, self.shape) or ()

    def hf_dims(self, sizes: dict[str, int]) -> tuple[int, ...]:
        """The shape of each HF tensor the row is built from."""
        return tuple(math.prod(int(a) if a.isdigit() else sizes[a] for a in group) for group in self.hf_axes)

    def lora_dims(self, sizes: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(A's axes without the rank, B's axes without the rank): Qwix's split of the weight's axes."""
        dims = self.dims(sizes)
        rest = tuple(d for i, d in enumerate(dims) if i not in self.contracting)
        return tuple(dims[i] for i in self.contracting), rest


@dataclass(frozen=True)
class HfTensor:
    """A tensor of an HF checkpoint's text decoder: what a checkpoint writer stores."""

    name: str  # under the decoder's prefix, e.g. layers.5.self_attn.k_proj.weight
    shape: tuple[int, ...]
    axes: tuple[str, ...]  # its shape in axis-letter groups (`TunixParam.hf_axes`): a vocabulary table starts "V"


@dataclass(frozen=True)
class Tensor:
    """A concrete tunix parameter of a model: what the planner prices on a mesh."""

    path: str  # e.g. layers.5.attn.k_einsum.w
    shape: tuple[int, ...]
    spec: Spec  # tunix's PartitionSpec for it
    contracting: tuple[int, ...] = ()  # axes a LoRA A matrix takes (empty: no LoRA possible)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def axis_sizes(kind: AttentionKind | None, hidden: int, intermediate: int, vocab: int = 0) -> dict[str, int]:
    sizes = {"V": vocab, "D": hidden, "F": intermediate}
    if kind is not None:
        sizes |= {"N": kind.num_heads, "K": kind.num_kv_heads, "H": kind.head_dim}
    return sizes


def spec_axis_sizes(spec: ModelSpec, layer: int | None = None) -> dict[str, int]:
    """Every axis letter's size in `spec` (on `layer`, whose MLP width and head layout may be its own)."""
    kind = None if layer is None else spec.kind(layer)
    mlp = spec.intermediate_size if layer is None else spec.mlp_dim(layer)
    sizes = axis_sizes(kind, spec.hidden_size, mlp, spec.vocab_size)
    sizes |= {"L": spec.num_layers, "P": spec.per_layer_input_dim}
    if spec.moe is not None:
        sizes |= {"E": spec.moe.num_experts, "X": spec.moe.expert_dim}
    return sizes


def has_feature(spec: ModelSpec, feature: str | None) -> bool:
    return feature is None or {"per_layer_input": spec.per_layer_input_dim > 0, "moe": spec.moe is not None}[feature]


@dataclass(frozen=True)
class TunixTable:
    """A family's rows plus its tunix model: module, class and the family's own ModelConfig fields."""

    rows: tuple[TunixParam, ...]
    module: str  # python module of the tunix model
    model_class: str
    # (text config.json, tunix model module, compute dtype) -> the family's ModelConfig fields (tunix_config.py)
    config_fields: Callable[[dict[str, Any], Any, Any], dict[str, Any]]
    # (layer types, KV-shared layer count) -> whether tunix shares K/V as transformers does (families without
    # KV sharing: only 0)
    kv_sharing_ok: Callable[[tuple[str, ...], int], bool] = lambda types, shared: shared == 0

    def layouts(self) -> set[str]:
        return {r.layout for r in self.rows if r.layout is not None}

    def attention_layout(self, kind: AttentionKind) -> str:
        """k_eq_v layers hold keys alone (`q_k`); tunix fuses q, k, v when heads == KV heads if the family has a
        fused row (`qkv`); otherwise separate q and kv einsums (`q_kv`)."""
        if kind.k_eq_v:
            return "q_k"
        if kind.num_heads == kind.num_kv_heads and "qkv" in self.layouts():
            return "qkv"
        return "q_kv"

    def layer_rows(self, spec: ModelSpec, layer: int) -> list[TunixParam]:
        """The rows of tunix's parameters on `layer` (its attention layout, the model's layer features)."""
        layout = self.attention_layout(spec.kind(layer))
        return [r for r in self.rows if r.per_layer and r.layout in (None, layout) and has_feature(spec, r.when)]

    def tensors(self, spec: ModelSpec) -> list[Tensor]:
        """Every parameter of the tunix model of `spec`, with its shape and default sharding (KV-shared layers
        included: tunix builds their K/V weights, never read)."""
        top = spec_axis_sizes(spec)
        out = [
            Tensor(r.path, r.dims(top), r.sharding) for r in self.rows if not r.per_layer and has_feature(spec, r.when)
        ]
        for i in range(spec.num_layers):
            kind, sizes = spec.kind(i), spec_axis_sizes(spec, i)
            for r in self.layer_rows(spec, i):
                sharding = r.sharding
                if r.one_head_unsplit and kind.num_kv_heads == 1:
                    sharding = tuple(None if a == "K" else s for a, s in zip(r.shape, r.sharding, strict=True))
                out.append(Tensor(f"layers.{i}.{r.path}", r.dims(sizes), sharding, r.contracting))
        return out

    def hf_tensors(self, spec: ModelSpec) -> list[HfTensor]:
        """Every tensor of `spec`'s HF checkpoint (text decoder, names under its prefix), in table order, layer by
        layer: the fused parts of a row each once, none of a KV-shared layer's K/V (HF has none), no head (tied)."""
        if not spec.tied_embeddings:
            raise ValueError(f"{spec.name}: untied embeddings: the HF <-> Tunix table has no lm_head row")
        out: dict[str, HfTensor] = {}

        def add(row: TunixParam, sizes: dict[str, int], prefix: str = "") -> None:
            for name in row.hf:
                t = HfTensor(prefix + name, row.hf_dims(sizes), row.hf_axes)
                if out.setdefault(t.name, t) != t:
                    raise ValueError(f"tunix table: HF tensor {t.name!r} has two shapes: {out[t.name]} vs {t}")

        top = spec_axis_sizes(spec)
        for r in self.rows:
            if not r.per_layer and has_feature(spec, r.when):
                add(r, top)
        for i in range(spec.num_layers):
            sizes = spec_axis_sizes(spec, i)
            for r in self.layer_rows(spec, i):
                if not (r.kv_owner_only and spec.kv_shared(i)):
                    add(r, sizes, f"layers.{i}.")
        return list(out.values())

    def lora_rows(self, spec: ModelSpec, layer: int, targets: list[str] | tuple[str, ...]) -> list[TunixParam]:
        """The rows of layer `layer` whose LoRA covers one of `targets` present there, in table order (a KV-shared
        layer's K/V einsum never runs, so Qwix gives it no LoRA)."""
        present = set(spec.targets_present(layer, targets))
        return [r for r in self.layer_rows(spec, layer) if set(r.lora) & present]

    def row(self, path: str) -> TunixParam:
        """The row of a tunix parameter path (`layers.<i>.` stripped for per-layer rows)."""
        per_layer = path.startswith("layers.")
        rest = path.split(".", 2)[2] if per_layer else path
        for r in self.rows:
            if r.per_layer == per_layer and r.path == rest:
                return r
        raise KeyError(f"no HF source known for tunix parameter {path!r}")


def lora_modules(tables: list[TunixTable]) -> dict[str, TunixParam]:
    """tunix LoRA module -> its row, over several families; a module must mean the same in each."""
    out: dict[str, TunixParam] = {}
    for table in tables:
        for r in table.rows:
            if not r.lora:
                continue
            seen = out.setdefault(r.module, r)
            if (seen.shape, seen.contracting, seen.lora, seen.weight) != (r.shape, r.contracting, r.lora, r.weight):
                raise ValueError(f"tunix LoRA module {r.module!r} has two layouts across families: {seen} vs {r}")
    return out
