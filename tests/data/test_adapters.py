"""The Grain and torch views of one prepared split: same rows, same tokens, same masks, per rank; trainer shapes."""

from __future__ import annotations

import numpy as np
import pytest

from crosstune.data import grain_dataset, prepare_dataset, rank_order, torch_dataset
from tests.helpers.data import recipe_for


@pytest.fixture(scope="module", params=[True, False], ids=["packed", "unpacked"])
def prepared(request, tmp_path_factory, tiny_gemma4_dir, synth_corpus_dir):
    folder = tmp_path_factory.mktemp("adapters")
    sources = [{"path": str(synth_corpus_dir / "train.jsonl")}]
    recipe = recipe_for(
        folder,
        tiny_gemma4_dir,
        "gemma4",
        sources,
        max_seq_len=1024,
        packing=request.param,
        subsample={"size": 41, "seed": 3},
    )
    return prepare_dataset(recipe)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_grain_and_torch_give_each_rank_the_same_tokens_and_masks(prepared, world_size):
    split = prepared.split("train")
    all_rows = split.rows(range(len(split)))
    for rank in range(world_size):
        kw = {"seed": 7, "epochs": 2, "rank": rank, "world_size": world_size}
        grain_rows = list(grain_dataset(prepared, batch_size=1, drop_remainder=False, **kw))
        torch_rows = torch_dataset(prepared, **kw)
        order = rank_order(len(split), **kw)
        assert len(grain_rows) == len(torch_rows) == len(order)
        for g, t, index in zip(grain_rows, torch_rows, order, strict=True):
            n = len(t["input_ids"])
            assert np.array_equal(g["input_tokens"][0, :n], t["input_ids"])
            assert np.array_equal(g["input_mask"][0, :n].astype(int), t["completion_mask"])
            assert np.array_equal(g["positions"][0, :n], t["position_ids"])
            assert not g["segment_ids"][0, n:].any() and not g["input_mask"][0, n:].any()
            assert np.array_equal(g["input_tokens"][0], all_rows["input_ids"][index])
            assert t["labels"] == [i if m else -100 for i, m in zip(t["input_ids"], t["completion_mask"], strict=True)]
            assert sum(t["seq_lengths"]) == n and len(t["seq_lengths"]) == g["segment_ids"][0].max()


def test_rank_order_partitions_each_epoch():
    n = 10
    for world in (1, 2, 3, 4):
        exact = [rank_order(n, seed=1, epochs=2, rank=r, world_size=world, even=False) for r in range(world)]
        sizes = [len(range(r, n, world)) for r in range(world)]  # rank r's share of one epoch
        assert [len(o) for o in exact] == [2 * k for k in sizes]
        for epoch in (0, 1):
            parts = [o[epoch * k : (epoch + 1) * k] for o, k in zip(exact, sizes, strict=True)]
            assert sorted(np.concatenate(parts).tolist()) == list(range(n))  # disjoint and complete
        even = [rank_order(n, seed=1, rank=r, world_size=world) for r in range(world)]
        assert len({len(o) for o in even}) == 1 and set(np.concatenate(even).tolist()) == set(range(n))
        assert sum(len(o) for o in even) - n == (-n) % world  # only the wrap-around repeats rows
    assert not np.array_equal(rank_order(n, seed=1), rank_order(n, seed=2))
    first, second = np.split(rank_order(n, seed=1, epochs=2), 2)
    assert sorted(first) == sorted(second) and not np.array_equal(first, second)


def test_grain_batches_have_fixed_shapes_for_jit(prepared):
    batches = list(grain_dataset(prepared, batch_size=4, seed=0))
    assert len(batches) == len(prepared.split("train")) // 4
    for b in batches:
        assert set(b) == {"input_tokens", "input_mask", "positions", "segment_ids"}
        assert {k: (v.shape, v.dtype.name) for k, v in b.items()} == {
            "input_tokens": ((4, 1024), "int32"),
            "input_mask": ((4, 1024), "bool"),
            "positions": ((4, 1024), "int32"),
            "segment_ids": ((4, 1024), "int32"),
        }


def test_trl_collator_and_tunix_loss_see_the_same_targets(prepared):
    """TRL's padding-free collator on the torch rows and Tunix's loss formula on the Grain batch, with logits that
    depend only on the current token, give the same loss: same target tokens, same normalisation."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    rows = torch_dataset(prepared, seed=0).select(range(4))
    batch = next(iter(grain_dataset(prepared, batch_size=4, seed=0)))
    collated = DataCollatorForLanguageModeling(pad_token_id=prepared.pad_id, padding_free=True)(list(rows))
    assert collated["input_ids"].shape == collated["labels"].shape == collated["position_ids"].shape
    assert np.array_equal(collated["position_ids"][0].numpy(), np.concatenate([r["position_ids"] for r in rows]))

    table = np.random.default_rng(0).normal(size=(1024, 1024)).astype(np.float64)  # logits row per token id

    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    # TRL / transformers: logits[:, :-1] predict labels[:, 1:], mean over labels != -100.
    ids, labels = collated["input_ids"][0].numpy(), collated["labels"][0].numpy()
    lp = log_softmax(table[ids[:-1]])
    keep = labels[1:] != -100
    trl_loss = -lp[keep, labels[1:][keep]].mean()
    # Tunix default loss: masked next-token CE over logits[:, :-1] vs tokens[:, 1:], / masked count.
    tokens, mask = batch["input_tokens"], batch["input_mask"]
    lp = log_softmax(table[tokens[:, :-1]])
    target = mask[:, 1:]
    tunix_loss = -np.take_along_axis(lp, tokens[:, 1:, None], -1)[..., 0][target].sum() / target.sum()
    assert keep.sum() == target.sum() > 0
    assert trl_loss == pytest.approx(tunix_loss, rel=1e-12)
