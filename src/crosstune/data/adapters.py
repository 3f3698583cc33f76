"""Thin views of one prepared split for each backend; both read rows in the order `rank_order` gives.

- JAX / Tunix: `grain_dataset` -> a Grain MapDataset of numpy batches {input_tokens, input_mask (the LOSS mask),
  positions, segment_ids}, each [B, L]; the backend builds a causal + same-segment attention mask from the last
  two. The order comes from `rank_order` rather than Grain's own `.shuffle().repeat()`, so that torch, which cannot
  reproduce Grain's shuffle, reads the very same rows.
- torch / TRL: `torch_dataset` -> a `datasets.Dataset`, one example per row in rank order (already shuffled and
  repeated: give it to the trainer with a sequential sampler and one epoch), padding removed: input_ids,
  completion_mask, position_ids (restarting per packed document), seq_lengths (document lengths: TRL's collator
  rebuilds position_ids from them, since TRL drops unknown columns) and labels (-100 where the mask is 0, so TRL
  uses our mask whatever its completion_only_loss setting). Packed rows need TRL's padding_free=True: without it the
  collator gives an all-ones attention mask and packed documents attend to each other.
"""

from __future__ import annotations

import numpy as np

from crosstune.data.order import rank_order
from crosstune.data.prepared import PreparedDataset, PreparedSplit

TORCH_CHUNK_ROWS = 2048  # rows converted to Arrow at a time (bounds memory for large splits)


class GrainRows:
    """Random-access source for Grain: element i is row order[i] as JAX-side numpy arrays [L]."""

    def __init__(self, rows: PreparedSplit, order: np.ndarray):
        self.rows, self.order = rows, order

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        row = self.rows[int(self.order[i])]
        return {
            "input_tokens": row["input_ids"],
            "input_mask": row["loss_mask"].astype(bool),
            "positions": row["positions"],
            "segment_ids": row["segment_ids"],
        }


def grain_dataset(
    prepared: PreparedDataset,
    split: str = "train",
    *,
    batch_size: int,
    seed: int,
    epochs: int = 1,
    rank: int = 0,
    world_size: int = 1,
    shuffle: bool = True,
    drop_remainder: bool = True,
):
    """Batches [batch_size, max_seq_len] of rank `rank`'s rows; drop_remainder keeps every batch one shape (jit)."""
    import grain

    rows = prepared.split(split)
    order = rank_order(len(rows), seed=seed, epochs=epochs, rank=rank, world_size=world_size, shuffle=shuffle)
    return grain.MapDataset.source(GrainRows(rows, order)).batch(batch_size, drop_remainder=drop_remainder)


def torch_dataset(
    prepared: PreparedDataset,
    split: str = "train",
    *,
    seed: int,
    epochs: int = 1,
    rank: int = 0,
    world_size: int = 1,
    shuffle: bool = True,
):
    """A `datasets.Dataset` of rank `rank`'s rows in reading order, padding-free (see the module docstring)."""
    import datasets
    import pyarrow as pa

    rows = prepared.split(split)
    order = rank_order(len(rows), seed=seed, epochs=epochs, rank=rank, world_size=world_size, shuffle=shuffle)
    chunks = [
        _arrow_chunk(rows.rows(order[lo : lo + TORCH_CHUNK_ROWS])) for lo in range(0, len(order), TORCH_CHUNK_ROWS)
    ]
    table = pa.concat_tables(chunks) if chunks else _arrow_chunk(rows.rows([]))
    return datasets.Dataset(datasets.table.InMemoryTable(table))


def _arrow_chunk(batch: dict[str, np.ndarray]):
    import pyarrow as pa

    lengths = np.count_nonzero(batch["segment_ids"], axis=1)  # padding is only ever at the end of a row
    keep = np.arange(batch["input_ids"].shape[1])[None, :] < lengths[:, None]
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    ids = batch["input_ids"][keep]
    mask = batch["loss_mask"][keep].astype(np.int8)
    columns = {
        "input_ids": ids,
        "completion_mask": mask,
        "position_ids": batch["positions"][keep],
        "labels": np.where(mask == 1, ids, -100).astype(np.int32),
    }
    out = {name: pa.ListArray.from_arrays(offsets, pa.array(values)) for name, values in columns.items()}
    doc_lengths = [np.bincount(seg[:n])[1:] for seg, n in zip(batch["segment_ids"], lengths, strict=True)]
    seq_offsets = np.concatenate([[0], np.cumsum([len(d) for d in doc_lengths])]).astype(np.int32)
    flat = np.concatenate(doc_lengths).astype(np.int32) if doc_lengths else np.zeros(0, np.int32)
    out["seq_lengths"] = pa.ListArray.from_arrays(pa.array(seq_offsets), pa.array(flat))
    return pa.table(out)
