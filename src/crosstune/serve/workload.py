"""Prompts of an exact token length, and request arrival times (vLLM's random dataset and arrival process)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class PromptMaker:
    """Random prompts of exactly `n` tokens from a tokenizer's ordinary (non-special) vocabulary.

    Completions send the ids themselves, so the server sees exactly `n` tokens. Chat needs text: the ids are decoded
    and re-encoded, and the text is trimmed / padded until it encodes to `n` tokens again (vLLM's random dataset
    does the same); usage.prompt_tokens is then n + the chat template's own tokens."""

    def __init__(self, tokenizer_dir: Path, seed: int = 0):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        special = set(self.tokenizer.all_special_ids)
        self.ids = np.array([i for i in range(len(self.tokenizer)) if i not in special], dtype=np.int64)
        self.rng = np.random.default_rng(seed)

    def ids_of_length(self, n: int) -> list[int]:
        return [int(i) for i in self.rng.choice(self.ids, size=n)]

    def text_of_length(self, n: int) -> str:
        ids = self.ids_of_length(n)
        for _ in range(20):
            text = self.tokenizer.decode(ids)
            got = self.tokenizer.encode(text, add_special_tokens=False)
            if len(got) == n:
                return text
            ids = got[:n] if len(got) > n else got + self.ids_of_length(n - len(got))
        raise ValueError(f"could not build a text of exactly {n} tokens with this tokenizer")

    def chat_prompt_tokens(self, text: str) -> int:
        """usage.prompt_tokens vLLM reports for one user message: the template applied with a generation prompt."""
        msgs = [{"role": "user", "content": text}]
        return len(self.tokenizer.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True))


def arrival_times(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Dispatch offsets (s) of `n` requests: all at 0 for rate inf; else Gamma(shape=b, scale=1/(rate·b)) gaps
    (b = 1: Poisson), cumulated and rescaled so the last one arrives at n/rate, as vLLM does."""
    if n <= 0:
        return []
    if rate == float("inf"):
        return [0.0] * n
    if rate <= 0 or burstiness <= 0:
        raise ValueError(f"request rate {rate} and burstiness {burstiness} must be > 0")
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    t = np.cumsum(gaps)
    t *= (n / rate) / t[-1]
    return [float(x) for x in t]
