"""Prompts of an exact token length, and request arrival times (vLLM's random dataset and arrival process)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class PromptMaker:
    """Random prompts of exactly `n` tokens from a tokenizer's ordinary (non-special) vocabulary.

    Completions send the ids themselves, so the server sees exactly `n` tokens. Chat needs text, and random ids
    rarely survive decode → encode (byte-level BPE re-merges across token boundaries), so chat prompts are drawn
    from "words": tokens that are a space plus letters/digits and encode back to themselves; the text is checked to
    encode to exactly `n` tokens. usage.prompt_tokens is then n + the chat template's own tokens."""

    WORD_CANDIDATES = 20_000  # tokens examined for words (a 262k vocabulary needs no more)

    def __init__(self, tokenizer_dir: Path, seed: int = 0):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        special = set(self.tokenizer.all_special_ids)
        self.ids = np.array([i for i in range(len(self.tokenizer)) if i not in special], dtype=np.int64)
        self.rng = np.random.default_rng(seed)
        self._words: list[str] | None = None

    def ids_of_length(self, n: int) -> list[int]:
        return [int(i) for i in self.rng.choice(self.ids, size=n)]

    def words(self) -> list[str]:
        if self._words is None:
            ids = self.ids if len(self.ids) <= self.WORD_CANDIDATES else self.rng.choice(self.ids, self.WORD_CANDIDATES)
            self._words = []
            for i in ids:
                word = self.tokenizer.decode([int(i)]).strip()
                if word.isalnum() and self.tokenizer.encode(" " + word, add_special_tokens=False) == [int(i)]:
                    self._words.append(" " + word)
        return self._words

    def text_of_length(self, n: int) -> str:
        words = self.words()
        for _ in range(50):
            text = "".join(self.rng.choice(words, size=n)) if words else ""
            if words and len(self.tokenizer.encode(text, add_special_tokens=False)) == n:
                return text
        raise ValueError(
            f"could not build a text of exactly {n} tokens with this tokenizer ({len(words)} single-token words "
            "found): use the completions API, whose prompts are token ids"
        )

    def chat_overhead_tokens(self) -> int:
        """The chat template's own tokens around one user message (what a chat prompt adds to its text)."""
        return self.chat_prompt_tokens("")

    def chat_prompt_tokens(self, text: str) -> int:
        """usage.prompt_tokens vLLM reports for one user message: the template applied with a generation prompt."""
        msgs = [{"role": "user", "content": text}]
        enc = self.tokenizer.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=True)
        return len(enc["input_ids"])


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
