"""A record far longer than max_seq_len is judged by its character count and never tokenized (a huge record
can't stall preparation)."""

from __future__ import annotations

import math
import time

import pytest
from transformers import AutoTokenizer

from crosstune.data import prepare_dataset
from crosstune.data.encode import ChatEncoder, max_chars_per_token
from tests.helpers.data import recipe_for, write_jsonl

GOOD = {"prompt": "Write a buffer.", "response": "assign y = a;"}
HUGE = {"prompt": "Write this module:\n" + "assign y = a & b; // wide\n" * 200_000, "response": "ok"}  # ~5.2 MB


@pytest.fixture(params=["gemma3", "gemma4"])
def tokenizer(request, tiny_gemma3_dir, tiny_gemma4_dir):
    return AutoTokenizer.from_pretrained({"gemma3": tiny_gemma3_dir, "gemma4": tiny_gemma4_dir}[request.param])


def test_the_bound_never_undercounts(tokenizer):
    """tokens >= ceil(characters / bound) on the texts that pack the most characters into a token: repeats of the
    longest vocabulary entries, special tokens, multi-byte characters and whitespace runs."""
    bound = max_chars_per_token(tokenizer)
    assert bound is not None
    vocab = tokenizer.get_vocab()
    longest = sorted(vocab, key=len, reverse=True)[:20]
    texts = [tokenizer.decode([vocab[entry]]) * 50 for entry in longest]
    texts += ["".join(tokenizer.all_special_tokens) * 20, "é漢🙂" * 300, " " * 5000, "\n" * 5000, "a" * 5000]
    for text in texts:
        n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        assert n >= math.ceil(len(text) / bound), (text[:40], n, len(text), bound)


def test_a_normalizer_that_merges_characters_gets_no_bound(tokenizer):
    from tokenizers import normalizers

    tokenizer.backend_tokenizer.normalizer = normalizers.NFKC()  # "ﬁ" -> "fi" is fine, but NFC/NFKC also compose
    assert max_chars_per_token(tokenizer) is None


def _watch_tokenizer(monkeypatch) -> list[int]:
    """The longest text handed to the Rust tokenizer, per batch."""
    seen: list[int] = []
    original = ChatEncoder.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        encode_batch = self.backend.encode_batch

        class Watched:
            def __getattr__(self, name):
                return getattr(encode_batch.__self__, name)

            def encode_batch(self, texts, **kw):
                seen.append(max(map(len, texts), default=0))
                return encode_batch(texts, **kw)

        self.backend = Watched()

    monkeypatch.setattr(ChatEncoder, "__init__", init)
    return seen


def test_a_5mb_record_is_skipped_without_tokenizing_it(tmp_path, tiny_gemma4_dir, monkeypatch):
    seen = _watch_tokenizer(monkeypatch)
    src = write_jsonl(tmp_path / "t.jsonl", [GOOD, HUGE, GOOD])
    recipe = recipe_for(tmp_path, tiny_gemma4_dir, "gemma4", [{"path": str(src)}], max_seq_len=256)
    t0 = time.perf_counter()
    stats = prepare_dataset(recipe).stats["splits"]["train"]  # strict: over-long is dropped, not an error
    elapsed = time.perf_counter() - t0
    assert stats["records_out"] == 2 and stats["skipped"] == {} and stats["dropped"] == {"too_long": 1}
    assert stats["dropped_examples"][0].startswith(f"{src}:2: at least ")
    assert max(seen) < 10_000  # the 5 MB text never reached the tokenizer
    assert elapsed < 30, elapsed  # generous for a loaded 2-core box; tokenizing it took ~10 s, rendering takes ~1 s


def test_truncate_policy_still_tokenizes_and_keeps_the_prompt(tmp_path, tiny_gemma4_dir):
    """Under truncate the record is cut to max_seq_len after tokenizing; the shortcut applies to drop only."""
    record = {"prompt": "short question", "response": "assign y = a; " * 400}
    src = write_jsonl(tmp_path / "t.jsonl", [GOOD, record])
    recipe = recipe_for(
        tmp_path, tiny_gemma4_dir, "gemma4", [{"path": str(src)}], max_seq_len=128, truncation="truncate"
    )
    stats = prepare_dataset(recipe).stats["splits"]["train"]
    assert stats["records_out"] == 2 and stats["truncated"] == 1
