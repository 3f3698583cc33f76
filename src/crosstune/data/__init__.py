"""Data: synthetic corpora and the one prepared dataset both backends train on.

`prepare_dataset(recipe)` writes backend-neutral shards (token ids, loss mask, segment ids, positions) and a
manifest; `load_prepared(recipe)` reads them back, refusing stale ones; `grain_dataset` / `torch_dataset` are the
two backends' views, in one shared row order (`rank_order`). The manifest's `chat_template_sha256`
(`chat_template_hash(tokenizer)`) names the template the prompts were rendered with: serving must use the same.
"""

from crosstune.data.adapters import grain_dataset, torch_dataset
from crosstune.data.bad_input import DataError
from crosstune.data.order import rank_order
from crosstune.data.prepare import data_provenance, prepare_dataset, training_data
from crosstune.data.prepared import (
    PreparedDataset,
    PreparedSplit,
    chat_template_hash,
    load_prepared,
    open_prepared,
    prepared_dir,
)

__all__ = [
    "DataError",
    "PreparedDataset",
    "PreparedSplit",
    "chat_template_hash",
    "data_provenance",
    "grain_dataset",
    "load_prepared",
    "open_prepared",
    "prepare_dataset",
    "prepared_dir",
    "rank_order",
    "torch_dataset",
    "training_data",
]
