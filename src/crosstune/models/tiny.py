"""Tiny Gemma 3 / Gemma 4 checkpoints for tests and CPU smoke runs: a real HF model directory, random weights.

The shapes come from `family.spec("tiny")` (every layout peculiarity of the big models, at hidden size 64), the
tokenizer is trained locally on the synthetic Verilog corpus, and the weights are transformers' own
initialisation under `torch.manual_seed(seed)` (crosstune.models.build; where torch does not import, numpy's draws by
the same rules): the same seed gives byte-identical files.
By default a text-only causal LM in fp32, one file; `layout`, `dtype` and `shards` give the hub's layout instead
(multimodal, bf16, sharded) at the same small size.
"""

from __future__ import annotations

from pathlib import Path

from crosstune.models.build import build_checkpoint


def build_tiny_model(
    family: str,
    out_dir: Path,
    seed: int = 0,
    corpus_dir: Path | None = None,
    size: str = "tiny",
    *,
    layout: str = "causal",
    dtype: str = "float32",
    shards: int = 1,
) -> Path:
    """Write a tiny `family` checkpoint (or another small CPU size of the family, e.g. "small") into `out_dir`.

    Files: config.json, model.safetensors (or `shards` shards and their index), generation_config.json (eos =
    [<eos>, turn end]), tokenizer.json, tokenizer_config.json (with the family's chat template) and
    special_tokens_map.json. The tokenizer is trained on `corpus_dir/train.jsonl`, or on a small synthetic corpus
    with a fixed seed when `corpus_dir` is None.
    """
    return build_checkpoint(
        family, out_dir, size=size, layout=layout, dtype=dtype, shards=shards, seed=seed, corpus_dir=corpus_dir
    )
