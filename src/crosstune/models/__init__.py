"""Model artefacts built locally: tiny Gemma checkpoints and their tokenizers."""

from __future__ import annotations

from crosstune.models.tiny import build_tiny_model
from crosstune.models.tokenizer import corpus_texts, save_tokenizer, special_tokens, train_tokenizer

__all__ = ["build_tiny_model", "corpus_texts", "save_tokenizer", "special_tokens", "train_tokenizer"]
