"""Render conversations with the tokenizer's chat template, tokenize, and mark the assistant tokens.

Why it is built this way: docs/DESIGN_NOTES.md, "crosstune.data.encode"."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from crosstune.data.bad_input import DataError, Ledger
from crosstune.data.conversation import Conversation
from crosstune.data.sources import LENIENT_HINT
from crosstune.families.base import ChatFormat

Rendered = tuple[str, list[tuple[int, int]]]  # (row text, assistant character spans); ("", []) for a bad record


@dataclass
class Encoded:
    where: str
    ids: np.ndarray  # int32 [T]
    mask: np.ndarray  # uint8 [T]
    straddling: int  # target tokens that reach outside their assistant span
    malformed: list[str]
    untrained_turns: int  # earlier assistant messages kept as context only (see the module docstring)
    min_tokens: int | None = None  # set when the text was provably too long to tokenize: a lower bound, ids empty


@dataclass(frozen=True)
class _Turn:
    prompt: str  # the served prompt: messages[:i] with the generation prompt
    completion: str  # what the model writes after it, through the end-of-turn marker
    tail: str  # what the template writes after the marker


class ChatEncoder:
    """Turns conversations into (token ids, loss mask) with one tokenizer and its chat template."""

    def __init__(self, tokenizer, chat: ChatFormat):
        if not getattr(tokenizer, "chat_template", None):
            raise DataError("model.path", "the tokenizer has no chat template: prepared data needs the family's")
        if len(tokenizer.encode(chat.turn_end, add_special_tokens=False)) != 1:
            reason = f"the end-of-turn marker {chat.turn_end!r} is not one token of this tokenizer"
            raise DataError("model.path", reason)
        self.tokenizer, self.turn_end = tokenizer, chat.turn_end
        self.header = f"{chat.turn_start}{chat.roles['assistant']}\n"  # how the template opens an assistant turn
        self.backend = tokenizer.backend_tokenizer  # the Rust tokenizer: batch encoding with offsets, no wrappers
        self.chars_per_token = max_chars_per_token(tokenizer)

    def encode(self, conversations: list[Conversation], ledger: Ledger, drop_over: int | None = None) -> list[Encoded]:
        """Encode a batch; conversations the template rejects go to the ledger and are left out. With `drop_over`
        (tokens), a text that provably has more tokens is not tokenized: it comes back with `min_tokens` set."""
        rendered = self._render(conversations, ledger)
        kept = [(k, text, spans) for k, ((text, spans), _) in enumerate(rendered) if text]
        out: dict[int, Encoded] = {}
        if drop_over is not None and self.chars_per_token:
            # ceil(characters / most characters per token) tokens at least: never more than the text really has
            # (also when the row is tokenized in pieces: each token still covers at most chars_per_token characters)
            bounds = [-(-len(text) // self.chars_per_token) for _, text, _ in kept]
            for (k, _, _), bound in zip(kept, bounds, strict=True):
                if bound > drop_over:
                    empty = np.zeros(0, dtype=np.int32)
                    conv, untrained = conversations[k], rendered[k][1]
                    out[k] = Encoded(
                        conv.where, empty, empty.astype(np.uint8), 0, conv.malformed, untrained, min_tokens=bound
                    )
            kept = [job for job, bound in zip(kept, bounds, strict=True) if bound <= drop_over]
        pieces = [piece for _, text, spans in kept for piece in _split_at_span_starts(text, spans)]
        encodings = iter(self.backend.encode_batch(pieces, add_special_tokens=False))
        for k, text, spans in kept:
            ids, masks, straddling = [], [], 0
            starts = [0] + [a for a, _ in spans]
            for n, piece in enumerate(_split_at_span_starts(text, spans)):
                enc = next(encodings)
                own = [(0, spans[n - 1][1] - starts[n])] if n else []  # piece n > 0 opens with span n - 1
                mask, cut = encoding_mask(enc, own, len(piece))
                ids.append(np.asarray(enc.ids, dtype=np.int32))
                masks.append(mask)
                straddling += cut
            conv, untrained = conversations[k], rendered[k][1]
            out[k] = Encoded(
                conv.where, np.concatenate(ids), np.concatenate(masks), straddling, conv.malformed, untrained
            )
        return [out[k] for k in sorted(out)]  # source order: strict mode stops at the first bad record

    def render(self, conversations: list[Conversation], ledger: Ledger) -> list[Rendered]:
        """(row text, assistant character spans) per conversation; ("", []) where the record is bad."""
        return [rendered for rendered, _ in self._render(conversations, ledger)]

    def _render(self, conversations: list[Conversation], ledger: Ledger) -> list[tuple[Rendered, int]]:
        """`render`, with the number of untrained earlier assistant messages of each conversation."""
        jobs: dict[tuple[int, int, bool], int] = {}  # (conversation, messages rendered, generation prompt) -> job
        for k, conv in enumerate(conversations):
            for i, msg in enumerate(conv.messages):
                if msg["role"] == "assistant":
                    for key in ((k, i, False), (k, i, True), (k, i + 1, False)):
                        jobs.setdefault(key, len(jobs))
        texts = self._render_all(
            [(conversations[k].messages[:n], conversations[k].template_kwargs, gen) for k, n, gen in jobs]
        )
        out: list[tuple[Rendered, int]] = []
        for k, conv in enumerate(conversations):
            try:
                turns = [
                    self._turn(i, *(texts[jobs[key]] for key in ((k, i, False), (k, i, True), (k, i + 1, False))))
                    for i, msg in enumerate(conv.messages)
                    if msg["role"] == "assistant"
                ]
            except _TemplateProblem as problem:
                ledger.bad(conv.where, "template", str(problem), hint=LENIENT_HINT)
                out.append((("", []), 0))
                continue
            row, spans = _row(turns)
            out.append(((row, spans), len(turns) - len(spans)))
        return out

    def _turn(self, i: int, history: str | Exception, prompt: str | Exception, conversation: str | Exception) -> _Turn:
        """Assistant message i: its served prompt, and its completion as the template renders it in a conversation."""
        for text, n in ((conversation, i + 1), (history, i), (prompt, i)):
            if isinstance(text, Exception):
                raise _TemplateProblem(f"the chat template rejected messages[:{n}]: {text}")
        if not conversation.startswith(history) or not prompt.startswith(history):
            raise _TemplateProblem(
                f"messages[:{i}] renders differently once assistant message {i} or the generation prompt follows, "
                f"so assistant message {i} cannot be located"
            )
        turn, generation = conversation[len(history) :], prompt[len(history) :]
        if not (turn.startswith(self.header) and generation.startswith(self.header)):
            raise _TemplateProblem(
                f"assistant message {i} or its generation prompt does not open with {self.header!r} "
                "(a chat template of another model family?)"
            )
        end = turn.find(self.turn_end, len(self.header))
        if end < 0:
            raise _TemplateProblem(f"no {self.turn_end!r} after assistant message {i} in the rendered text")
        end += len(self.turn_end)
        body, prefill = turn[len(self.header) : end], generation[len(self.header) :]
        completion = body[len(prefill) :] if body.startswith(prefill) else body
        return _Turn(prompt, completion, turn[end:])

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


class _TemplateProblem(Exception):
    pass


def _row(turns: list[_Turn]) -> Rendered:
    """The final turn's served prompt + completion + tail; an earlier turn is a span where its own served prompt
    and completion are a prefix of that row (always, with prefix-stable templates)."""
    last = turns[-1]
    row, end = last.prompt + last.completion + last.tail, len(last.prompt)
    spans: list[tuple[int, int]] = []
    for t in turns[:-1]:
        a, b = len(t.prompt), len(t.prompt) + len(t.completion)
        if row.startswith(t.prompt + t.completion) and (spans[-1][1] if spans else 0) <= a and b <= end:
            spans.append((a, b))
    return row, [*spans, (end, end + len(last.completion))]


def _split_at_span_starts(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """The row cut where each span starts; the first piece is the first trained turn's served prompt."""
    cuts = [0, *(a for a, _ in spans), len(text)]
    return [text[a:b] for a, b in pairwise(cuts)]


def max_chars_per_token(tokenizer) -> int | None:
    """The most characters of the input text one token can stand for, or None when no such bound is known.

    Why it is a bound: byte-level BPE spells each vocabulary entry with one symbol per byte, so a token covers at
    most len(entry) bytes, and a UTF-8 character is at least one byte: at most len(entry) characters. SentencePiece-
    style BPE (Gemma's tokenizer.json) spells one symbol per character; its byte-fallback entries (<0x41>) are longer
    than the one byte they stand for, which only loosens the bound. Added tokens match their literal text, and
    get_vocab() lists them too. The bound needs a normalizer that never merges characters: none, Prepend, or
    one-character Replace (" " -> "▁") qualify; NFC/NFKC and the like may merge, so those get no bound."""
    from crosstune.untrusted_files import parse_json

    spec = parse_json(tokenizer.backend_tokenizer.to_str(), "the tokenizer").get("normalizer")
    parts = (spec.get("normalizers") or [spec]) if spec else []
    for part in parts:
        if part["type"] == "Prepend":
            continue
        if part["type"] == "Replace" and len(part["pattern"].get("String", "--")) == 1 and len(part["content"]) == 1:
            continue
        return None
    return max(len(entry) for entry in tokenizer.get_vocab())


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
