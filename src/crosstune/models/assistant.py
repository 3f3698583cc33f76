"""Gemma 4 multi-token-prediction drafters ("assistants") in transformers' `gemma4_assistant` layout, built for a
given base checkpoint: `Gemma4AssistantForCausalLM` (transformers 5.12 models/gemma4_assistant), the class Google's
published drafters use (google/gemma-4-31B-it-assistant, …) and that vLLM 0.32 serves as `gemma4_mtp`.

A drafter has no K/V projections of its own: every layer reads the base's K/V of the last base layer of its type
(transformers: `shared_kv_states`; vLLM: `kv_sharing_target_layer_name`, v1/spec_decode/gemma4.py), so its per-type
head sizes and KV heads are the base's. Its input is [base embedding of the last token, base hidden state]
(2 × the base's hidden size, `backbone_hidden_size`), projected to its own smaller hidden size; its output is a token
and a hidden state projected back to the base's size, fed to its next step.

Built with transformers' init under `torch.manual_seed(seed)`, except two things that make "the next token repeats
the last one" its starting guess — a pattern a base's greedy text has (21 % of the tiny base's next tokens) and a
random drafter can't express: its vocabulary table (the tied lm_head) is the base's scaled embeddings through its own
input projection (`embed_from_base`), and its layers start as the identity (their post-norms at 0).
`models.drafter_fit` then fits it to the base's greedy outputs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from crosstune.errors import InputError
from crosstune.model_configs import decoder_config, read_model_config

ASSISTANT_TYPE = "gemma4_assistant"
ASSISTANT_CLASS = "Gemma4AssistantForCausalLM"
# Google's drafters: 4 layers (the model card of google/gemma-4-31B-it-assistant and its MLX conversions: 4 layers,
# hidden 1024 for 31B and 12B). A tiny base's drafter keeps the layer count at half its hidden size.
ASSISTANT_LAYERS = 4
# what the drafter's config takes from its base's (model_configs.TextConfig types and bounds each)
ASSISTANT_READS = ("hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim")


def base_text_config(base_dir: Path) -> dict:
    """The base's text config (the `text_config` of a multimodal checkpoint), refused unless it is a Gemma 4 a
    drafter can read K/V from (no MoE: the published 26B-A4B drafter exists, but crosstune builds dense ones only)."""
    cfg = read_model_config(base_dir)
    text = decoder_config(cfg) if isinstance(cfg, dict) else None
    if not isinstance(text, dict) or text.get("model_type") not in ("gemma4_text", "gemma4"):
        kind = text.get("model_type") if isinstance(text, dict) else type(cfg).__name__
        raise InputError(
            f"{base_dir}/config.json: a {kind!r} model; an MTP drafter is built for a Gemma 4 base "
            "(model_type gemma4_text, or gemma4 with a text_config)"
        )
    if missing := [k for k in ASSISTANT_READS if text.get(k) is None]:
        what = f"no {', '.join(missing)}: a drafter is built from the base's sizes"
        raise InputError(f"{base_dir}/config.json: {what}; restore the config from the model's source")
    if text.get("enable_moe_block"):
        raise InputError(f"{base_dir}/config.json: a mixture-of-experts base; build the drafter of a dense Gemma 4")
    from huggingface_hub.errors import StrictDataclassError

    try:  # transformers types each value the drafter carries over (a null sliding_window, found by the fuzzer)
        assistant_config(text)
    except StrictDataclassError as e:
        raise InputError(
            f"{base_dir}/config.json: {' '.join(str(e).split())}; restore the config from the model's source"
        ) from None
    return text


def assistant_config(base: dict, *, hidden_size: int | None = None, layers: int = ASSISTANT_LAYERS):
    """A `Gemma4AssistantConfig` for the base text config `base`: the base's heads, head sizes, KV heads, windows,
    rope and vocabulary; its own hidden size (default: half the base's), `layers` layers ending in a global one."""
    import transformers

    hidden = hidden_size or max(32, base["hidden_size"] // 2)
    types = ["sliding_attention"] * (layers - 1) + ["full_attention"]
    keep = ("vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim", "global_head_dim",
            "num_global_key_value_heads", "attention_k_eq_v", "sliding_window", "rope_parameters", "rms_norm_eps",
            "hidden_activation", "max_position_embeddings", "pad_token_id", "bos_token_id", "eos_token_id",
            "final_logit_softcapping", "attention_bias")  # fmt: skip
    text = {k: base[k] for k in keep if k in base}
    text.update(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        layer_types=types,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
        num_kv_shared_layers=layers,  # every layer reads the base's K/V
        enable_moe_block=False,
        use_double_wide_mlp=False,
        tie_word_embeddings=True,
    )
    text_config = transformers.Gemma4TextConfig(**text)
    config = transformers.Gemma4AssistantConfig(text_config=text_config, backbone_hidden_size=base["hidden_size"])
    config.architectures = [ASSISTANT_CLASS]
    return config


def build_assistant(
    base_dir: Path,
    out_dir: Path,
    *,
    seed: int = 0,
    hidden_size: int | None = None,
    layers: int = ASSISTANT_LAYERS,
    dtype: str = "float32",
):
    """A random drafter for the base in `base_dir` (the model, in memory; `save_assistant` writes it)."""
    import torch
    import transformers

    from crosstune.models.build import randomise_scales

    config = assistant_config(base_text_config(Path(base_dir)), hidden_size=hidden_size, layers=layers)
    config.dtype = dtype
    torch.manual_seed(seed)
    model = transformers.Gemma4AssistantForCausalLM(config).eval()
    randomise_scales(model)
    embed_from_base(model, Path(base_dir))
    with torch.no_grad():  # every layer starts as the identity: its post-norms (x * w, unit RMS) at 0
        for name, param in model.named_parameters():
            if name.endswith(("post_attention_layernorm.weight", "post_feedforward_layernorm.weight")):
                param.zero_()
    return model.to(getattr(torch, dtype))


def embed_from_base(model, base_dir: Path) -> None:
    """The drafter's vocabulary table (tied to its lm_head) = the base's input embeddings, scaled as the base scales
    them (× sqrt(hidden)), through the token half of the drafter's input projection, at RMS 0.25: the drafter's
    logits then start out largest for the token it was given."""
    import torch
    from safetensors import safe_open

    files = sorted(Path(base_dir).glob("*.safetensors"))
    for f in files:
        with safe_open(str(f), "pt") as fh:
            key = next((k for k in fh.keys() if k.endswith("embed_tokens.weight") and "per_layer" not in k), None)
            if key is not None:
                base = fh.get_tensor(key).float()
                break
    else:
        raise InputError(f"{base_dir}: no embed_tokens.weight in its safetensors: not a Gemma 4 checkpoint")
    d = base.shape[1]
    with torch.no_grad():
        table = (base * d**0.5) @ model.pre_projection.weight[:, :d].float().T
        table = 0.25 * table / table.pow(2).mean().sqrt()  # logits of a few units, not tens
        model.get_input_embeddings().weight.copy_(table.to(model.dtype))


def save_assistant(model, base_dir: Path, out_dir: Path) -> Path:
    """Write the drafter (safetensors, config.json) and the base's tokenizer files (vLLM reads the target's
    tokenizer; a drafter folder with its own loads on its own in transformers)."""
    from crosstune.models.tokenizer import TOKENIZER_FILE_NAMES

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    for name in TOKENIZER_FILE_NAMES:
        if (Path(base_dir) / name).is_file():
            shutil.copyfile(Path(base_dir) / name, out_dir / name)
    return out_dir


def check_pair(base_dir: Path, draft_dir: Path) -> list[str]:
    """Why the drafter in `draft_dir` can't draft for the base in `base_dir` ([] when it can): its type, its
    backbone size against the base's hidden size, its vocabulary, and its per-type heads against the base's."""
    draft = read_model_config(draft_dir)
    if not isinstance(draft, dict) or draft.get("model_type") not in (ASSISTANT_TYPE, "gemma4_unified_assistant"):
        kind = draft.get("model_type") if isinstance(draft, dict) else None
        return [f"{draft_dir}/config.json: model_type {kind!r}, not a Gemma 4 MTP drafter ({ASSISTANT_TYPE})"]
    base = base_text_config(base_dir)
    text = draft.get("text_config") or {}
    problems = []
    if draft.get("backbone_hidden_size") != base.get("hidden_size"):
        problems.append(
            f"drafter backbone_hidden_size {draft.get('backbone_hidden_size')} != base hidden_size "
            f"{base.get('hidden_size')} (a drafter of another size)"
        )
    for key in ("vocab_size", "head_dim", "global_head_dim", "num_key_value_heads", "num_global_key_value_heads"):
        if key in text and key in base and text[key] != base[key]:
            problems.append(f"drafter {key} {text[key]} != base {key} {base[key]} (it reads the base's K/V)")
    return problems
