"""Render conversations with the tokenizer's chat template, tokenize once, and mark the assistant tokens.

The loss mask comes from character spans, not from re-tokenizing pieces: the assistant part of message i starts
where the rendering of messages[:i] with the generation prompt ends (that prefix must be a prefix of the whole
rendering) and ends just after the first end-of-turn token that follows, which is the stop token the model must
learn. Boundary rule: a token is a target iff its character range overlaps an assistant span by at least one
character, so a token straddling a span edge is trained on (counted as `straddling_tokens`; with Gemma's
templates spans start after a newline and end at a special token, where byte-level BPE never straddles).
Convention: mask[t] = 1 means token t is a prediction target (predicted from the tokens before it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crosstune.data.conversation import Conversation
from crosstune.data.errors import DataError, Ledger
from crosstune.data.sources import LENIENT_HINT


@dataclass
class Encoded:
    where: str
    ids: np.ndarray  # int32 [T]
    mask: np.ndarray  # uint8 [T]
    straddling: int  # target tokens that reach outside their assistant span
    malformed: list[str]
    min_tokens: int | None = None  # set when the text was provably too long to tokenize: a lower bound, ids empty


class ChatEncoder:
    """Turns conversations into (token ids, loss mask) with one tokenizer and its chat template."""

    def __init__(self, tokenizer, turn_end: str):
        if not getattr(tokenizer, "chat_template", None):
            raise DataError("model.path", "the tokenizer has no chat template: prepared data needs the family's")
        if len(tokenizer.encode(turn_end, add_special_tokens=False)) != 1:
            raise DataError("model.path", f"the end-of-turn marker {turn_end!r} is not one token of this tokenizer")
        self.tokenizer, self.turn_end = tokenizer, turn_end
        self.backend = tokenizer.backend_tokenizer  # the Rust tokenizer: batch encoding with offsets, no wrappers
        self.chars_per_token = max_chars_per_token(tokenizer)

    def encode(self, conversations: list[Conversation], ledger: Ledger, drop_over: int | None = None) -> list[Encoded]:
        """Encode a batch; conversations the template rejects go to the ledger and are left out. With `drop_over`
        (tokens), a text that provably has more tokens is not tokenized: it comes back with `min_tokens` set."""
        rendered = self.render(conversations, ledger)
        kept = [(k, text, spans) for k, (text, spans) in enumerate(rendered) if text]
        out: dict[int, Encoded] = {}
        if drop_over is not None and self.chars_per_token:
            # ceil(characters / most characters per token) tokens at least: never more than the text really has
            bounds = [-(-len(text) // self.chars_per_token) for _, text, _ in kept]
            for (k, _, _), bound in zip(kept, bounds, strict=True):
                if bound > drop_over:
                    empty = np.zeros(0, dtype=np.int32)
                    conv = conversations[k]
                    out[k] = Encoded(conv.where, empty, empty.astype(np.uint8), 0, conv.malformed, min_tokens=bound)
            kept = [job for job, bound in zip(kept, bounds, strict=True) if bound <= drop_over]
        encodings = self.backend.encode_batch([text for _, text, _ in kept], add_special_tokens=False)
        for (k, text, spans), enc in zip(kept, encodings, strict=True):
            mask, straddling = encoding_mask(enc, spans, len(text))
            conv = conversations[k]
            out[k] = Encoded(conv.where, np.asarray(enc.ids, dtype=np.int32), mask, straddling, conv.malformed)
        return [out[k] for k in sorted(out)]  # source order: strict mode stops at the first bad record

    def render(self, conversations: list[Conversation], ledger: Ledger) -> list[tuple[str, list[tuple[int, int]]]]:
        """(rendered text, assistant character spans) per conversation; ("", []) where the record is bad."""
        fulls = self._render_all([(c.messages, c.template_kwargs, False) for c in conversations])
        jobs, owners = [], []
        for k, conv in enumerate(conversations):
            for i, msg in enumerate(conv.messages):
                if msg["role"] == "assistant":
                    jobs.append((conv.messages[:i], conv.template_kwargs, True))
                    owners.append((k, i))
        prefixes = self._render_all(jobs)
        spans: list[list[tuple[int, int]]] = [[] for _ in conversations]
        problems: dict[int, str] = {k: f"the chat template rejected it: {f}" for k, f in enumerate(fulls) if _failed(f)}
        for (k, i), prefix in zip(owners, prefixes, strict=True):
            if k in problems:
                continue
            full = fulls[k]
            if _failed(prefix):
                problems[k] = f"the chat template rejected messages[:{i}]: {prefix}"
            elif not full.startswith(prefix) or (spans[k] and len(prefix) < spans[k][-1][1]):
                problems[k] = (
                    f"messages[:{i}] rendered with the generation prompt is not a prefix of the whole conversation, "
                    f"so assistant message {i} cannot be located (the chat template is not prefix-stable)"
                )
            elif (end := full.find(self.turn_end, len(prefix))) < 0:
                problems[k] = f"no {self.turn_end!r} after assistant message {i} in the rendered text"
            else:
                spans[k].append((len(prefix), end + len(self.turn_end)))
        out = []
        for k, conv in enumerate(conversations):
            if k in problems:
                ledger.bad(conv.where, "template", problems[k], hint=LENIENT_HINT)
                out.append(("", []))
            else:
                out.append((fulls[k], spans[k]))
        return out

    def _render_all(self, jobs: list[tuple[list[dict], dict, bool]]) -> list[str | Exception]:
        """Render many conversations, batched per template-argument set; a failure is returned, not raised."""
        out: list[str | Exception] = [""] * len(jobs)
        groups: dict[tuple, list[int]] = {}
        for n, (_, kwargs, gen) in enumerate(jobs):
            groups.setdefault((tuple(sorted(kwargs.items())), gen), []).append(n)
        for (kwargs, gen), members in groups.items():
            batch = [jobs[n][0] for n in members]
            try:
                texts = self._apply(batch, gen, dict(kwargs))
            except Exception:  # one bad conversation fails the batch: find it (them) one by one
                texts = []
                for messages in batch:
                    try:
                        texts.append(self._apply([messages], gen, dict(kwargs))[0])
                    except Exception as e:  # noqa: BLE001 (the template's own error message is the report)
                        texts.append(e)
            for n, text in zip(members, texts, strict=True):
                out[n] = text
        return out

    def _apply(self, batch: list[list[dict]], gen: bool, kwargs: dict) -> list[str]:
        if not batch:
            return []
        texts = self.tokenizer.apply_chat_template(batch, tokenize=False, add_generation_prompt=gen, **kwargs)
        return list(texts)


def max_chars_per_token(tokenizer) -> int | None:
    """The most characters of the input text one token can stand for, or None when no such bound is known.

    Why it is a bound: byte-level BPE spells each vocabulary entry with one symbol per byte, so a token covers at
    most len(entry) bytes, and a UTF-8 character is at least one byte: at most len(entry) characters. SentencePiece-
    style BPE (Gemma's tokenizer.json) spells one symbol per character; its byte-fallback entries (<0x41>) are longer
    than the one byte they stand for, which only loosens the bound. Added tokens match their literal text, and
    get_vocab() lists them too. The bound needs a normalizer that never merges characters: none, Prepend, or
    one-character Replace (" " -> "▁") qualify; NFC/NFKC and the like may merge, so those get no bound."""
    import json

    spec = json.loads(tokenizer.backend_tokenizer.to_str()).get("normalizer")
    parts = (spec.get("normalizers") or [spec]) if spec else []
    for part in parts:
        if part["type"] == "Prepend":
            continue
        if part["type"] == "Replace" and len(part["pattern"].get("String", "--")) == 1 and len(part["content"]) == 1:
            continue
        return None
    return max(len(entry) for entry in tokenizer.get_vocab())


def _failed(value: str | Exception) -> bool:
    return isinstance(value, Exception)


def encoding_mask(enc, spans: list[tuple[int, int]], text_len: int) -> tuple[np.ndarray, int]:
    """`spans_to_mask` for a tokenizers Encoding, reading its offset map at the span edges only (offsets are
    non-decreasing, so the tokens between the first and the last overlapping token all lie inside)."""
    n = len(enc.ids)
    mask = np.zeros(n, dtype=np.uint8)
    straddling = 0
    for a, b in spans:
        first = enc.char_to_token(a)
        after = enc.char_to_token(b) if b < text_len else n  # the token holding the first character after the span
        if first is None or after is None:  # a character no token covers: read the whole offset map instead
            return spans_to_mask(np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2), spans)
        last = after if after < n and enc.token_to_chars(after)[0] < b else after - 1
        mask[first : last + 1] = 1
        starts_before, ends_after = enc.token_to_chars(first)[0] < a, enc.token_to_chars(last)[1] > b
        straddling += int(starts_before or ends_after) if first == last else int(starts_before) + int(ends_after)
    return mask, straddling


def spans_to_mask(offsets: np.ndarray, spans: list[tuple[int, int]]) -> tuple[np.ndarray, int]:
    """Loss mask from token character offsets [T, 2] and assistant spans: overlap by >= 1 character is a target."""
    starts, ends = offsets[:, 0], offsets[:, 1]
    mask = np.zeros(len(offsets), dtype=bool)
    straddling = 0
    for a, b in spans:
        inside = (starts < b) & (ends > a)
        straddling += int(np.count_nonzero(inside & ((starts < a) | (ends > b))))
        mask |= inside
    return mask.astype(np.uint8), straddling
