"""What a model family knows: its sizes, HF config mapping, module names on both stacks, chat format."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crosstune.families.spec import AttentionKind, ModelSpec
from crosstune.families.tunix_table import Tensor, TunixTable
from crosstune.model_configs import decoder_config

HF_LAYER_TYPE = {"sliding_attention": "sliding", "full_attention": "global"}
HF_LAYER_TYPE_INV = {v: k for k, v in HF_LAYER_TYPE.items()}


def gemma_layer_pattern(num_layers: int, every: int = 6) -> tuple[str, ...]:
    """Gemma's 5 sliding : 1 global pattern (layers 5, 11, ... are global)."""
    return tuple("global" if (i + 1) % every == 0 else "sliding" for i in range(num_layers))


# Neutral target -> HF module path inside a decoder layer.
HF_TARGET_MODULES = {
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
}


@dataclass(frozen=True)
class ChatFormat:
    """The control tokens of a family's chat template (the template text lives with the tokenizer)."""

    bos: str
    turn_start: str
    turn_end: str
    roles: dict[str, str]  # neutral role -> role word in the template
    has_system_turn: bool
    thought_start: str | None = None  # native reasoning channel (Gemma 4)
    thought_end: str | None = None
    extra_special: tuple[str, ...] = ()


@dataclass(frozen=True)
class HfArch:
    """One transformers architecture of a family: the text config's model_type and classes, and the hub
    checkpoint's multimodal config and model classes (its decoder under `model.language_model.`)."""

    model_type: str
    causal_lm_class: str  # text-only checkpoints
    decoder_layer_class: str  # what FSDP wraps and torch.compile compiles
    multimodal_config: str
    multimodal_model: str


@dataclass(frozen=True)
class Family:
    name: str
    hf_model_type: str
    hf_causal_lm_class: str  # transformers class for text-only checkpoints
    decoder_layer_class: str  # what FSDP wraps
    chat: ChatFormat
    sizes: dict[str, ModelSpec] = field(hash=False)
    attention_from_hf: Callable[[dict[str, Any]], dict[str, AttentionKind]] = field(hash=False, repr=False)
    build_hf_config: Callable[[ModelSpec], dict[str, Any]] = field(hash=False, repr=False)
    tunix: TunixTable = field(hash=False, repr=False)  # the one HF <-> Tunix table (families/<name>/tunix.py)
    # text config -> the ModelSpec fields of layouts beyond attention (Gemma 4's per-layer inputs, KV sharing, MoE)
    layout_from_hf: Callable[[dict[str, Any]], dict[str, Any]] = field(default=lambda cfg: {}, hash=False, repr=False)
    multimodal_config: str = ""  # the hub checkpoints' classes (HfArch)
    multimodal_model: str = ""
    # A second architecture with the same decoder layers (Gemma 4 12B's gemma4_unified): specs with `unified` set
    unified_arch: HfArch | None = None
    # The RMSNorm weight of a norm that leaves its input's scale alone (transformers' init): 1 where the norm scales
    # by w (Gemma 4), 0 where by 1 + w (Gemma 3)
    norm_identity: float = 1.0

    @property
    def hf_model_types(self) -> tuple[str, ...]:
        """Every text config model_type of the family (a config.json of any of them is this family's)."""
        return (self.hf_model_type,) + ((self.unified_arch.model_type,) if self.unified_arch else ())

    def hf_arch(self, spec: ModelSpec | None = None) -> HfArch:
        """The transformers architecture of `spec` (the family's own without a spec or for a spec not `unified`)."""
        if spec is not None and spec.unified:
            if self.unified_arch is None:
                raise ValueError(f"{spec.name}: unified, but {self.name} has no unified architecture")
            return self.unified_arch
        return HfArch(
            self.hf_model_type,
            self.hf_causal_lm_class,
            self.decoder_layer_class,
            self.multimodal_config,
            self.multimodal_model,
        )

    def spec(self, size: str) -> ModelSpec:
        if size not in self.sizes:
            raise KeyError(f"unknown {self.name} size {size!r}; known: {', '.join(self.sizes)}")
        return self.sizes[size]

    def shallow_kv_shared(self, spec: ModelSpec, layer_types: tuple[str, ...]) -> int:
        """How many of `layer_types` (a shallower model of `spec`'s size) are KV-shared: about the size's fraction,
        at the nearest count both stacks share alike (`tunix.kv_sharing_ok`; 2 layers: none). The one rule for a
        model cut to fewer layers: `model build --layers`, the planner's and XLA's shallow compiles."""
        if not spec.kv_shared_layers:
            return 0
        wanted = spec.kv_shared_layers / spec.num_layers * len(layer_types)
        fits = [n for n in range(len(layer_types)) if self.tunix.kv_sharing_ok(layer_types, n)]
        return min(fits, key=lambda n: (abs(n - wanted), n))

    # --- HF config <-> spec -------------------------------------------------------------------
    def spec_from_hf_config(self, cfg: dict[str, Any], name: str = "custom") -> ModelSpec:
        cfg = decoder_config(cfg)  # multimodal checkpoints nest the decoder config
        # a null is an absent key here, as crosstune.model_configs reads it: a size the family needs then fails as
        # missing, naming the key (a null head count was a TypeError in the recipe's tp check; found by the fuzzer)
        cfg = {k: v for k, v in cfg.items() if v is not None}
        if cfg.get("model_type") not in (*self.hf_model_types, None):
            raise ValueError(
                f"config model_type {cfg.get('model_type')!r} is not {self.name} ({', '.join(self.hf_model_types)})"
            )
        unified = self.unified_arch is not None and cfg.get("model_type") == self.unified_arch.model_type
        layer_types = tuple(HF_LAYER_TYPE[t] for t in cfg["layer_types"])
        return ModelSpec(
            family=self.name,
            name=name,
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            vocab_size=cfg["vocab_size"],
            layer_types=layer_types,
            attention=self.attention_from_hf(cfg),
            tied_embeddings=cfg.get("tie_word_embeddings", True),
            final_logit_softcap=cfg.get("final_logit_softcapping"),
            rope_theta={
                HF_LAYER_TYPE[k]: float(v["rope_theta"]) for k, v in (cfg.get("rope_parameters") or {}).items()
            },
            query_pre_attn_scalar=cfg.get("query_pre_attn_scalar"),
            unified=unified,
            **self.layout_from_hf(cfg),
        )

    def hf_config(self, spec: ModelSpec, **overrides: Any) -> dict[str, Any]:
        """A transformers config dict (model_type, layer_types, heads, ...) reproducing `spec`."""
        return {**self.build_hf_config(spec), **overrides}

    # --- module names -------------------------------------------------------------------------
    def hf_lora_modules(self, spec: ModelSpec, targets: list[str] | tuple[str, ...]) -> list[str]:
        """Fully qualified HF module names (text-only layout) that LoRA adapts for `targets`."""
        names = []
        for layer in range(spec.num_layers):
            for t in spec.targets_present(layer, targets):
                names.append(f"model.layers.{layer}.{HF_TARGET_MODULES[t]}")
        return names

    def peft_target_regex(self, targets: list[str] | tuple[str, ...]) -> str:
        """A PEFT `target_modules` regex restricted to the language model's decoder layers
        (a multimodal checkpoint's vision tower has look-alike Linear layers)."""
        leaves = "|".join(re.escape(HF_TARGET_MODULES[t]) for t in targets)
        return rf"^(?:model\.language_model\.|model\.)layers\.\d+\.(?:{leaves})$"

    def fuses_qkv(self, kind: AttentionKind) -> bool:
        """Whether tunix holds q, k and v of this layer type in one qkv_einsum (one LoRA module for all three)."""
        return self.tunix.attention_layout(kind) == "qkv"

    def tunix_lora_modules(self, spec: ModelSpec, layer: int, targets: list[str] | tuple[str, ...]) -> list[str]:
        """Tunix module names (within a layer) that carry LoRA for `targets`: fused einsums cover several."""
        return [r.module for r in self.tunix.lora_rows(spec, layer, targets)]

    def tunix_tensors(self, spec: ModelSpec) -> list[Tensor]:
        """Every parameter of the tunix model of `spec` with its shape and tunix's default sharding."""
        return self.tunix.tensors(spec)
