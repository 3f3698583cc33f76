"""The demo's split of the synthetic Verilog task kinds: the base learns some (crosstune.pretrain.base_model's
BASE_KINDS), the LoRA teaches and is scored on others, so a pass@1 gain is something the fine-tune taught."""

from __future__ import annotations

# The task kinds the demo's LoRA teaches and evaluates on: short, regular modules a LoRA learns in minutes.
HELD_OUT_KINDS = ("vector_gate", "parity_popcount", "gray_code", "decoder")  # registry order
DEFAULT_TRAIN, DEFAULT_EVAL = 600, 60  # LoRA records and held-out problems (15 per held-out task kind)


def split_record() -> dict:
    """What the demo's corpus is held out from, recorded in its manifest.json ("split"). Its keys and text are part
    of the corpus's settings: a change would make every earlier demo corpus another one (regenerated, retrained)."""
    from crosstune.pretrain.base_model import BASE_KINDS, PretrainConfig

    return {
        "families": list(HELD_OUT_KINDS),
        "base_families": list(BASE_KINDS),
        "base_corpus_seed": PretrainConfig().corpus_seed,
        "note": "train and eval hold only families the pretrained base never saw; eval parameters appear in no "
        "training record (the base's corpus has none of these families, this train.jsonl draws fresh parameters)",
    }
