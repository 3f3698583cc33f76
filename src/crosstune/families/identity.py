"""Which model a hub id or a config.json names: the one table of the Gemma releases crosstune knows by name, and the
config.json facts that settle it when the config is at hand (its model_type, its quantization, its dimensions).

A name is matched piece by piece (`gemma-3-4b` in `google/gemma-3-4b-it`, never `gemma-4` in `medgemma-4b`): the
first row of RELEASES that matches says what the model is, its crosstune family and size, or why crosstune can't
train it. A pre-quantized checkpoint (bitsandbytes, GPTQ, AWQ, NVFP4, GGUF, ...: by its name, or any
`quantization_config` in its config.json) is refused by name: crosstune trains LoRA on bf16 weights."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from crosstune.families.base import Family

# The released sizes of each family (its other sizes are the tests' and the demo's), as hub names write them
RELEASED = {"gemma3": ("1b", "4b", "12b", "27b"), "gemma4": ("e2b", "e4b", "26b-a4b", "12b", "31b")}
TRAINED = "crosstune trains " + " and ".join(
    f"Gemma {name.removeprefix('gemma')} ({', '.join(s.upper() for s in sizes)})" for name, sizes in RELEASED.items()
)


@dataclass(frozen=True)
class Release:
    """A model line by its hub name: `pattern` (lower case) found between non-alphanumerics; `family` None is
    refused with `why`; a `size` group in the pattern names the size when `size` is not given."""

    pattern: str
    what: str
    family: str | None = None
    size: str | None = None
    why: str = ""

    def match(self, name: str) -> re.Match | None:
        return re.search(rf"(?<![a-z0-9]){self.pattern}(?![a-z0-9])", name.lower())


_GEMMA_1 = "Gemma 1's architecture (no sliding-window layers)"
RELEASES: tuple[Release, ...] = (
    Release(r"gemma-?3n(?:-e[24]b)?", "Gemma 3n", why="another architecture than Gemma 3 (MatFormer, per-layer "
            "embeddings, AltUp): transformers' gemma3n, which crosstune's families do not lay out"),
    Release(r"medgemma-(?:1\.5-)?4b", "MedGemma 4B (a Gemma 3 4B)", "gemma3", "4b"),
    Release(r"medgemma-27b", "MedGemma 27B (a Gemma 3 27B)", "gemma3", "27b"),
    Release(r"t5gemma(?:-2)?", "T5Gemma", why="an encoder-decoder model"),
    Release(r"paligemma-?2?", "PaliGemma", why="a vision-language model on Gemma 1 or 2"),
    Release(r"recurrentgemma", "RecurrentGemma", why="a recurrent (Griffin) architecture"),
    Release(r"codegemma", "CodeGemma", why=_GEMMA_1),
    Release(r"embeddinggemma", "EmbeddingGemma", why="an embedding model (bidirectional attention, no LM head)"),
    Release(r"gemma-(?:1\.1-)?(?:2b|7b)", "Gemma 1", why=_GEMMA_1),
    Release(r"gemma-?2", "Gemma 2", why="Gemma 2's architecture (its own softcaps and layer pattern)"),
    Release(rf"gemma-?3-(?P<size>{'|'.join(RELEASED['gemma3'])})", "Gemma 3", "gemma3"),
    Release(r"gemma-?3", "Gemma 3", "gemma3"),
    Release(rf"gemma-?4-(?P<size>{'|'.join(RELEASED['gemma4'])})", "Gemma 4", "gemma4"),
    Release(r"gemma-?4", "Gemma 4", "gemma4"),
)  # fmt: skip
# A checkpoint whose weights are stored quantized, by a name piece the quantizers' uploads carry
QUANTIZED_NAME = re.compile(
    r"(?<![a-z0-9])(bnb-4bit|bnb-8bit|4bit|8bit|gptq|awq|nvfp4|mxfp4|fp8|int4|int8|w4a16|w8a8|w4a8|gguf|mlx|exl2|"
    r"hqq|aqlm|eetq)(?![a-z0-9])"
)
# config.json model_types of other Gemma lines (text or multimodal), for a refusal that says what the model is
OTHER_MODEL_TYPES = {
    "gemma": "Gemma 1",
    "gemma2": "Gemma 2",
    "gemma3n": "Gemma 3n",
    "gemma3n_text": "Gemma 3n",
    "paligemma": "PaliGemma",
    "recurrent_gemma": "RecurrentGemma",
    "t5gemma": "T5Gemma",
}


@dataclass(frozen=True)
class Identity:
    """What a model is, in words, and its crosstune family and size (None: a size crosstune has no spec for). No
    family: refused (`refused` says why, when more than what it is); a family and `refused`: a checkpoint of it
    crosstune can't train (pre-quantized)."""

    what: str
    family: str | None = None
    size: str | None = None
    refused: str = ""


def by_name(repo_id: str) -> Identity | None:
    """The model a hub id names by its name alone (None: no Gemma release crosstune knows of): a foreign config's
    OWNER/NAME or a recipe's hf://OWNER/NAME (crosstune.hub's spelling), the same name either way."""
    name = repo_id.rsplit("/", 1)[-1]
    release, found = next(((r, m) for r in RELEASES if (m := r.match(name))), (None, None))
    if release is None or found is None:
        return None
    size = release.size or found.groupdict().get("size")
    what = f"{release.what} {size.upper()}" if size and release.size is None else release.what
    quantized = QUANTIZED_NAME.search(name.lower())
    if release.family is None:
        return Identity(what, refused=release.why)
    if quantized and "unquantized" not in name.lower():
        return Identity(what, release.family, size, refused=_quantized(f"{quantized.group(1)} in its name", what))
    return Identity(what, release.family, size)


def by_config(cfg: Any, families: dict[str, Family]) -> Identity:
    """The model a config.json describes by its model_type and quantization (the size is the caller's: it compares
    dimensions). `families`: crosstune's, by name."""
    if not isinstance(cfg, dict):
        return Identity("a folder whose config.json is not a JSON object of settings")
    text = cfg.get("text_config")
    text = text if isinstance(text, dict) else cfg
    model_type = text.get("model_type")
    outer = cfg.get("model_type")
    family = next((f for f in families.values() if model_type in f.hf_model_types), None)
    if family is None:
        known = OTHER_MODEL_TYPES.get(str(model_type)) or OTHER_MODEL_TYPES.get(str(outer))
        if known is None:
            return Identity(f"a {model_type or outer!r} model")
        return Identity(known, refused=f"config.json's model_type is {model_type or outer!r}")
    what = f"Gemma {family.name.removeprefix('gemma')}"
    for where in (cfg, text):
        quant = where.get("quantization_config")
        if quant is not None:
            method = quant.get("quant_method") if isinstance(quant, dict) else None
            return Identity(
                what,
                family.name,
                refused=_quantized(f"config.json's quantization_config, quant_method {method!r}", what),
            )
    return Identity(what, family.name)


def _quantized(evidence: str, what: str) -> str:
    return (
        f"a pre-quantized checkpoint of {what} ({evidence}): crosstune trains LoRA on bf16 weights, so name the "
        "bf16 checkpoint it was quantized from (QLoRA's 4-bit base maps to LoRA on that bf16 base)"
    )
