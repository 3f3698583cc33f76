"""A text checkpoint inside Gemma 4's multimodal layout, as the official checkpoints ship."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch


def tiny_multimodal_gemma4(text_dir: Path, out: Path) -> Path:
    """The tiny Gemma 4 inside a Gemma4ForConditionalGeneration with a 1-layer vision tower (the official
    checkpoints' layout: model.language_model.*, model.vision_tower.*), same text weights and tokenizer."""
    from transformers import AutoModelForCausalLM, Gemma4Config, Gemma4ForConditionalGeneration

    text = json.loads((text_dir / "config.json").read_text())
    for key in ("architectures", "transformers_version", "dtype"):
        text.pop(key, None)
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    vision |= {"num_key_value_heads": 2, "head_dim": 16}
    media = {k: 5000 + i for i, k in enumerate(("image_token_id", "boi_token_id", "eoi_token_id", "video_token_id"))}
    config = Gemma4Config(text_config=text, vision_config=vision, audio_config=None, **media)  # ids outside vocab
    torch.manual_seed(0)
    model = Gemma4ForConditionalGeneration(config).float()
    text_model = AutoModelForCausalLM.from_pretrained(text_dir, dtype=torch.float32)
    state = {k.replace("model.", "model.language_model.", 1): v for k, v in text_model.state_dict().items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("vision" in k for k in missing)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        shutil.copy(text_dir / name, out / name)
    return out
