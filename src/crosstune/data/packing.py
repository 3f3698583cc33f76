"""Sequence length policy and row layout: best-fit-decreasing packing with segment ids and per-document positions.

A row is max_seq_len tokens. Packed rows hold several documents: segment ids number them 1..k (0 = padding) and
positions restart at 0 in each, so a causal + same-segment attention mask keeps documents apart. Unpacked, each
document is its own row. Padding is always at the end of a row: pad id, mask 0, segment 0, position 0.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ROW_FIELDS = ("input_ids", "loss_mask", "segment_ids", "positions")
DOC_FIELDS = ("doc_row", "doc_start", "doc_length", "doc_truncated", "doc_index")


def fit_length(
    ids: np.ndarray, mask: np.ndarray, max_len: int, policy: str
) -> tuple[np.ndarray, np.ndarray, bool] | str:
    """The document as it goes into a row, or why it cannot: "too_long" (drop) / "prompt_too_long" (truncate).

    truncate keeps the prompt and cuts the answer at max_len (the end-of-turn token is cut off with it, so the model
    is never taught to stop mid-answer); if not even one answer token fits, the record is dropped.
    """
    if len(ids) <= max_len:
        return ids, mask, False
    if policy == "drop":
        return "too_long"
    first_target = int(np.argmax(mask)) if mask.any() else len(mask)
    if first_target >= max_len:
        return "prompt_too_long"
    return ids[:max_len], mask[:max_len], True


def best_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Bins of document indices: longest first, each into the fullest row that still has room."""
    bins: list[list[int]] = []
    keys: list[int] = []  # sorted free capacities that some open row has
    rows_with: dict[int, list[int]] = {}  # free capacity -> rows (a stack, for determinism)
    for i in sorted(range(len(lengths)), key=lambda k: (-lengths[k], k)):
        need = lengths[i]
        if need > capacity:
            raise ValueError(f"document {i} has {need} tokens, more than the row length {capacity}")
        p = bisect_left(keys, need)
        if p < len(keys):
            free = keys[p]
            row = rows_with[free].pop()
            if not rows_with[free]:
                del rows_with[free]
                keys.pop(p)
        else:
            row, free = len(bins), capacity
            bins.append([])
        bins[row].append(i)
        free -= need
        if free > 0:
            if free not in rows_with:
                insort(keys, free)
                rows_with[free] = []
            rows_with[free].append(row)
    return bins


@dataclass
class Rows:
    """One split's rows [R, L] and a table of the documents in them [D]."""

    input_ids: np.ndarray
    loss_mask: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    doc_row: np.ndarray
    doc_start: np.ndarray
    doc_length: np.ndarray
    doc_truncated: np.ndarray
    doc_index: np.ndarray  # the document's position in the input order (maps a row back to its record)

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in ROW_FIELDS + DOC_FIELDS}


def build_rows(
    docs: Sequence[tuple[np.ndarray, np.ndarray]],
    truncated: Sequence[bool],
    max_len: int,
    packing: bool,
    pad_id: int,
) -> Rows:
    """Lay documents (ids, mask) out in rows of `max_len`: packed by best-fit-decreasing, or one per row."""
    lengths = [len(ids) for ids, _ in docs]
    bins = best_fit_decreasing(lengths, max_len) if packing else [[i] for i in range(len(docs))]
    n_rows, n_docs = len(bins), len(docs)
    input_ids = np.full((n_rows, max_len), pad_id, dtype=np.int32)
    loss_mask = np.zeros((n_rows, max_len), dtype=np.uint8)
    segment_ids = np.zeros((n_rows, max_len), dtype=np.int32)
    positions = np.zeros((n_rows, max_len), dtype=np.int32)
    table = {name: np.zeros(n_docs, dtype=np.int32) for name in DOC_FIELDS}
    table["doc_truncated"] = np.zeros(n_docs, dtype=np.uint8)
    d = 0
    for r, members in enumerate(bins):
        start = 0
        for seg, i in enumerate(members, 1):
            ids, mask = docs[i]
            end = start + len(ids)
            input_ids[r, start:end] = ids
            loss_mask[r, start:end] = mask
            segment_ids[r, start:end] = seg
            positions[r, start:end] = np.arange(len(ids), dtype=np.int32)
            for name, value in zip(DOC_FIELDS, (r, start, len(ids), truncated[i], i), strict=True):
                table[name][d] = value
            start, d = end, d + 1
    return Rows(input_ids, loss_mask, segment_ids, positions, **table)
