"""Prompts of an exact token length, and request arrival times (vLLM's random dataset and arrival process).

Prompts come from a per-run seed (`bench serve` draws a fresh one unless `--seed` asks for an exact rerun): the
same seed against a long-lived server sends the very same prompts, and its prefix cache then answers them. With
`prefix_reuse` R every prompt of a context starts with the same R × context tokens (servebench.prompt_cache), drawn
once per context, and goes on with tokens of its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from crosstune.servebench.prompt_cache import shared_prefix_tokens
from crosstune.servebench.sweep_config import BenchError


class PromptMaker:
    """Random prompts of exactly `n` tokens from a tokenizer's ordinary (non-special) vocabulary.

    Completions send the ids themselves, so the server sees exactly `n` tokens. Chat needs text, and random ids
    rarely survive decode → encode (byte-level BPE re-merges across token boundaries), so chat prompts are drawn
    from "words": tokens that are a space plus letters/digits and encode back to themselves; the text is checked to
    encode to exactly `n` tokens. usage.prompt_tokens is then n + the chat template's own tokens."""

    WORD_CANDIDATES = 20_000  # tokens examined for words (a 262k vocabulary needs no more)

    def __init__(self, tokenizer_dir: Path, seed: int = 0, prefix_reuse: float | None = None):
        from transformers import AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        except Exception as e:  # transformers parses the folder's files: a damaged one raises anything (OSError,
            # ValueError, huggingface_hub's StrictDataclassError for a wrong type in config.json)
            why = " ".join(str(e).split())[:300] or type(e).__name__
            raise BenchError(
                f"--tokenizer {tokenizer_dir}: no tokenizer can be loaded from it ({why}): give "
                "the served model's folder, with its tokenizer files"
            ) from None
        special = set(self.tokenizer.all_special_ids)
        self.ids = np.array([i for i in range(len(self.tokenizer)) if i not in special], dtype=np.int64)
        self.rng = np.random.default_rng(seed)
        self.prefix_reuse = prefix_reuse
        self._words: list[str] | None = None
        self._prefix_ids: dict[int, list[int]] = {}
        self._prefix_text: dict[int, str] = {}

    def ids_of_length(self, n: int) -> list[int]:
        """A prompt of `n` token ids: the context's shared prefix (prefix_reuse), then ids of its own."""
        shared = shared_prefix_tokens(n, self.prefix_reuse)
        if shared and n not in self._prefix_ids:
            self._prefix_ids[n] = self._random_ids(shared)
        return self._prefix_ids.get(n, []) + self._random_ids(n - shared)

    def _random_ids(self, n: int) -> list[int]:
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
        """A text of exactly `n` tokens: the context's shared prefix (prefix_reuse), then words of its own."""
        shared = shared_prefix_tokens(n, self.prefix_reuse)
        if shared and n not in self._prefix_text:
            self._prefix_text[n] = self._words_of_length(shared, "")
        return self._words_of_length(n, self._prefix_text.get(n, ""))

    def _words_of_length(self, n: int, prefix: str) -> str:
        words = self.words()
        count = n - len(self.tokenizer.encode(prefix, add_special_tokens=False)) if prefix else n
        for _ in range(50):
            text = prefix + "".join(self.rng.choice(words, size=count)) if words else ""
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
