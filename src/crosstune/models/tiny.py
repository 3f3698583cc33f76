"""Tiny Gemma 3 / Gemma 4 checkpoints for tests and CPU smoke runs: a real HF model directory, random weights.

The shapes come from `family.spec("tiny")` (every layout peculiarity of the big models, at hidden size 64), the
tokenizer is trained locally on the synthetic Verilog corpus, and the weights are transformers' own
initialisation under `torch.manual_seed(seed)` with norms, layer scalars and embeddings randomised (see
`_randomise_scales`): the same seed gives byte-identical files.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from crosstune.families import get_family
from crosstune.models.tokenizer import corpus_texts, save_tokenizer, train_tokenizer
from crosstune.synth import generate_corpus

# The corpus the tokenizer is trained on when none is given (fixed, so the tokenizer is too).
DEFAULT_CORPUS = {"n_train": 400, "n_eval": 0, "seed": 0}
# Embedding std of the tiny models: with transformers' 0.02 the tied-embedding logits stay within about ±1, too small
# for a wrong softcap or norm mapping to show in a logits comparison; 0.1 gives logits of several units.
TINY_EMBED_STD = 0.1


def _randomise_scales(model) -> None:
    """Norm weights, layer scalars and embeddings away from their init values, drawn from the global torch RNG.

    At init every norm is the identity (Gemma 3 stores w=0 for x*(1+w), Gemma 4 w=1 for x*w) and every layer scalar
    is 1, so a converter that drops or swaps them would still match; random values make such a mistake visible.
    """
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.add_(torch.empty_like(param).uniform_(-0.5, 0.5))
        for name, buf in model.named_buffers():
            if name.endswith("layer_scalar"):
                buf.uniform_(0.5, 1.5)
        model.get_input_embeddings().weight.normal_(0.0, TINY_EMBED_STD)


def build_tiny_model(
    family: str, out_dir: Path, seed: int = 0, corpus_dir: Path | None = None, size: str = "tiny"
) -> Path:
    """Write a tiny `family` checkpoint (or another small CPU size of the family, e.g. "small") into `out_dir`.

    Files: config.json, model.safetensors (fp32), generation_config.json (eos = [<eos>, turn end]), tokenizer.json,
    tokenizer_config.json (with the family's chat template) and special_tokens_map.json. The tokenizer is trained
    on `corpus_dir/train.jsonl`, or on a small synthetic corpus with a fixed seed when `corpus_dir` is None.
    """
    import torch
    import transformers

    fam = get_family(family)
    spec = fam.spec(size)
    out_dir = Path(out_dir)

    if corpus_dir is None:
        with tempfile.TemporaryDirectory(prefix="crosstune-corpus-") as tmp:
            generate_corpus(Path(tmp), **DEFAULT_CORPUS)
            texts = corpus_texts(Path(tmp))
    else:
        texts = corpus_texts(Path(corpus_dir))
    tokenizer = train_tokenizer(family, texts, vocab_size=spec.vocab_size)

    named = {"pad": "<pad>", "eos": "<eos>", "bos": fam.chat.bos, "turn_end": fam.chat.turn_end}
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in named.items()}
    hf = fam.hf_config(
        spec,
        vocab_size=len(tokenizer),
        pad_token_id=ids["pad"],
        bos_token_id=ids["bos"],
        eos_token_id=[ids["eos"], ids["turn_end"]],
        dtype="float32",
    )
    config_class = transformers.CONFIG_MAPPING[hf.pop("model_type")]
    config = config_class(**hf)  # layer_types at construction: setting it later leaves derived fields stale
    torch.manual_seed(seed)
    model = getattr(transformers, fam.hf_causal_lm_class)(config).to(torch.float32).eval()
    _randomise_scales(model)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=ids["bos"], eos_token_id=[ids["eos"], ids["turn_end"]], pad_token_id=ids["pad"]
    )

    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    save_tokenizer(tokenizer, out_dir)
    return out_dir
