"""A model folder's config.json and an adapter folder's adapter_config.json, foreign files: each read once (through
crosstune.untrusted_files, the one bounded reader) into a typed, bounded model before any code does arithmetic on it.

Every key crosstune reads has its type (strict: `"8"`, `8.0` and `true` are not 8) and its range, checked here; a
file that fails is one line, `FILE: KEY: what is wrong: what to do` (UnreadableFile), never a traceback or a model of
zero-element tensors. Keys crosstune does not read are kept as they are (transformers and vLLM read them). The
readers return the checked mapping: the families, the planner, the drafter builder and serve read the same dict as
before, now typed. The bounds are generous (what no real checkpoint reaches) and say what they count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from crosstune.bounds import MAX_LAYERS, RECIPE
from crosstune.untrusted_files import UnreadableFile, read_json

MODEL_CONFIG = "config.json"
ADAPTER_CONFIG = "adapter_config.json"
MAX_WIDTH = 1 << 17  # hidden, intermediate and per-layer sizes: Gemma 4 31B's hidden is 5,376, its MLP 21,504
MAX_VOCAB = 1 << 21  # tokens: Gemma's vocabulary is 262,144
MAX_HEADS = 1024  # attention heads per layer (Gemma 4 31B: 32), KV heads, experts
MAX_HEAD_DIM = 4096  # Gemma 4's global head dim is 512
MAX_POSITIONS = 1 << 24  # context and sliding window, in tokens (Gemma 4: 262,144)
MAX_TOKEN_ID = MAX_VOCAB + (1 << 20)  # special and media token ids may lie past the text vocabulary
MAX_NAME = 256  # model_type, a module name, a pattern
MAX_MODULES = 4096  # names in target_modules, modules_to_save, patterns

Count = Annotated[int, Field(ge=1)]
Width = Annotated[int, Field(ge=1, le=MAX_WIDTH)]
Heads = Annotated[int, Field(ge=1, le=MAX_HEADS)]
HeadDim = Annotated[int, Field(ge=1, le=MAX_HEAD_DIM)]
Positions = Annotated[int, Field(ge=1, le=MAX_POSITIONS)]
TokenId = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]
Name = Annotated[str, Field(max_length=MAX_NAME)]
Positive = Annotated[float, Field(gt=0, le=1e12)]
LayerType = Literal["sliding_attention", "full_attention"]
Rank = Annotated[int, Field(ge=1, le=int(RECIPE["lora.rank"].high))]
Alpha = Annotated[float, Field(gt=0, le=RECIPE["lora.alpha"].high)]


class _Foreign(BaseModel):
    """Strict types, finite numbers, and every other key kept as it is."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class RopeParameters(_Foreign):
    rope_type: Name | None = None
    rope_theta: Positive | None = None


class TextConfig(_Foreign):
    """The decoder's keys crosstune reads (a text-only checkpoint's config, or a multimodal one's text_config)."""

    model_type: Name | None = None
    hidden_size: Width | None = None
    intermediate_size: Width | None = None
    moe_intermediate_size: Width | None = None
    vocab_size: Annotated[int, Field(ge=1, le=MAX_VOCAB)] | None = None
    vocab_size_per_layer_input: Annotated[int, Field(ge=0, le=MAX_VOCAB)] | None = None
    hidden_size_per_layer_input: Annotated[int, Field(ge=0, le=MAX_WIDTH)] | None = None
    num_hidden_layers: Annotated[int, Field(ge=1, le=MAX_LAYERS)] | None = None
    layer_types: Annotated[list[LayerType], Field(max_length=MAX_LAYERS)] | None = None
    num_attention_heads: Heads | None = None
    num_key_value_heads: Heads | None = None
    num_global_key_value_heads: Heads | None = None
    head_dim: HeadDim | None = None
    global_head_dim: HeadDim | None = None
    sliding_window: Positions | None = None
    max_position_embeddings: Positions | None = None
    num_kv_shared_layers: Annotated[int, Field(ge=0, le=MAX_LAYERS)] | None = None
    num_experts: Heads | None = None
    top_k_experts: Heads | None = None
    attention_k_eq_v: bool | None = None
    enable_moe_block: bool | None = None
    use_double_wide_mlp: bool | None = None
    tie_word_embeddings: bool | None = None
    attention_bias: bool | None = None
    final_logit_softcapping: Positive | None = None
    query_pre_attn_scalar: Positive | None = None
    rms_norm_eps: Annotated[float, Field(gt=0, le=1)] | None = None
    rope_parameters: dict[LayerType, RopeParameters] | None = None  # per layer type (transformers 5's Gemma layout)
    pad_token_id: TokenId | None = None
    bos_token_id: TokenId | None = None
    eos_token_id: TokenId | Annotated[list[TokenId], Field(max_length=MAX_MODULES)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TextConfig:
        if self.layer_types is not None and self.num_hidden_layers is not None:
            if len(self.layer_types) != self.num_hidden_layers:
                layers = len(self.layer_types)
                raise ValueError(f"layer_types lists {layers} layers, num_hidden_layers says {self.num_hidden_layers}")
        if self.rope_parameters is not None and self.layer_types is not None:  # transformers reads each type's
            if missing := sorted(set(self.layer_types) - set(self.rope_parameters)):
                raise ValueError(f"rope_parameters has no {', '.join(missing)}, which layer_types lists")
        shared, layers = self.num_kv_shared_layers, self.num_hidden_layers
        if shared and layers and shared > layers:
            raise ValueError(f"num_kv_shared_layers {shared} is more than num_hidden_layers {layers}")
        if self.top_k_experts and self.num_experts and self.top_k_experts > self.num_experts:
            raise ValueError(f"top_k_experts {self.top_k_experts} is more than num_experts {self.num_experts}")
        return self


class ModelConfig(TextConfig):
    """A checkpoint's config.json: its decoder's keys at the top, or under text_config (multimodal checkpoints and
    drafters); `backbone_hidden_size`: a drafter's base hidden size."""

    text_config: TextConfig | None = None
    backbone_hidden_size: Width | None = None
    architectures: Annotated[list[Name], Field(max_length=16)] | None = None


class AdapterConfig(_Foreign):
    """The keys of a PEFT adapter_config.json crosstune reads (export, serve, resume): rank, alpha and their
    per-module patterns, the features a merge can't reproduce, where the base is."""

    peft_type: Name = "LORA"
    r: Rank
    lora_alpha: Alpha | None = None
    rank_pattern: Annotated[dict[Name, Rank], Field(max_length=MAX_MODULES)] | None = None
    alpha_pattern: Annotated[dict[Name, Alpha], Field(max_length=MAX_MODULES)] | None = None
    target_modules: Name | Annotated[list[Name], Field(max_length=MAX_MODULES)] | None = None
    use_rslora: bool = False
    use_dora: bool = False
    fan_in_fan_out: bool = False
    bias: Name = "none"
    base_model_name_or_path: Annotated[str, Field(max_length=4096)] | None = None


def _where(error: dict[str, Any]) -> str:
    return ".".join(str(part) for part in error["loc"]) or "the file"


def _checked(path: Path, model: type[_Foreign], what_to_do: str) -> dict:
    raw = read_json(path, what_to_do)
    if not isinstance(raw, dict):
        raise UnreadableFile(path, None, f"a JSON object of keys, not a {type(raw).__name__}", "bad_json", what_to_do)
    try:
        model.model_validate(raw)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        given = repr(first["input"])
        given = given if len(given) <= 60 else given[:60] + "…"
        reason = f"{_where(first)}: {first['msg']} (it holds {given})"
        raise UnreadableFile(path, None, reason, "bad_value", what_to_do) from None
    return raw


def decoder_config(cfg: dict) -> dict:
    """A config's decoder keys: a multimodal checkpoint's (or a drafter's) text_config, else the config itself. A
    null text_config is an absent one, as the typed model reads it (a null was an AttributeError; found by the
    fuzzer)."""
    return cfg.get("text_config") or cfg


def read_model_config(model_dir: str | Path) -> dict:
    """A model folder's config.json, its keys crosstune reads typed and bounded (ModelConfig); an UnreadableFile
    names the file, the key and what it holds."""
    return _checked(Path(model_dir) / MODEL_CONFIG, ModelConfig, "restore it from the model's source")


def read_adapter_config(adapter_dir: str | Path) -> dict:
    """An adapter folder's adapter_config.json, typed and bounded (AdapterConfig); an UnreadableFile names the key."""
    what_to_do = "restore the adapter folder from its source, or export the run again"
    return _checked(Path(adapter_dir) / ADAPTER_CONFIG, AdapterConfig, what_to_do)
