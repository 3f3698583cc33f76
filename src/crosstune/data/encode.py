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


class ChatEncoder:
    """Turns conversations into (token ids, loss mask) with one tokenizer and its chat template."""

    def __init__(self, tokenizer, turn_end: str):
        if not getattr(tokenizer, "chat_template", None):
            raise DataError("model.path", "the tokenizer has no chat template: prepared data needs the family's")
        if len(tokenizer.encode(turn_end, add_special_tokens=False)) != 1:
            raise DataError("model.path", f"the end-of-turn marker {turn_end!r} is not one token of this tokenizer")
        self.tokenizer, self.turn_end = tokenizer, turn_end
        self.backend = tokenizer.backend_tokenizer  # the Rust tokenizer: batch encoding with offsets, no wrappers

    def encode(self, conversations: list[Conversation], ledger: Ledger) -> list[Encoded]:
        """Encode a batch; conversations the template rejects go to the ledger and are left out."""
        rendered = self.render(conversations, ledger)
        kept = [(conv, text, spans) for conv, (text, spans) in zip(conversations, rendered, strict=True) if text]
        encodings = self.backend.encode_batch([text for _, text, _ in kept], add_special_tokens=False)
        out = []
        for (conv, text, spans), enc in zip(kept, encodings, strict=True):
            mask, straddling = encoding_mask(enc, spans, len(text))
            out.append(Encoded(conv.where, np.asarray(enc.ids, dtype=np.int32), mask, straddling, conv.malformed))
        return out

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
