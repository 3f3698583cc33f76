"""A small byte-level BPE tokenizer per family, trained locally: tiny models need nothing from a model hub.

Layout follows Gemma's: `<pad>`=0, `<eos>`=1, `<bos>`=2, `<unk>`=3, then the family's control tokens (turn and
thought-channel markers) as single special ids, then 256 byte symbols and the learned merges. Encoding adds
`<bos>` in front (as Gemma's tokenizers do); chat templates write `<bos>` themselves and
`apply_chat_template` encodes without special tokens, so a rendered conversation has exactly one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from crosstune.confinement import inside
from crosstune.errors import InputError
from crosstune.families import chat_template, get_family
from crosstune.untrusted_files import UnreadableFile, jsonl_rows, read_json

BASE_SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>")
CORPUS_FIELDS = ("system", "prompt", "response")


class CorpusError(InputError, ValueError):
    """A corpus a tokenizer can't be trained on: a row that is not an object, no text, too little for the vocabulary."""


def special_tokens(family_name: str) -> list[str]:
    """The family's special tokens in id order: pad, eos, bos, unk, then its chat control tokens."""
    chat = get_family(family_name).chat
    tokens = [*BASE_SPECIAL_TOKENS, chat.turn_start, chat.turn_end]
    if chat.thought_start and chat.thought_end:
        tokens += [chat.thought_start, chat.thought_end]
    tokens += chat.extra_special
    return list(dict.fromkeys(tokens))


def corpus_texts(corpus_dir: Path) -> list[str]:
    """The non-empty system/prompt/response strings of `corpus_dir/train.jsonl`, in file order."""
    path = Path(corpus_dir) / "train.jsonl"
    if not path.is_file():
        raise InputError(f"{path} not found: a corpus directory holds train.jsonl (see `crosstune synth`)")
    inside(corpus_dir, path.absolute(), label="the corpus")  # a link out: its target would be learned and shipped
    texts = []
    for line_no, row in jsonl_rows(path):
        if isinstance(row, UnreadableFile):
            raise row
        row = {} if row is None else row
        if not isinstance(row, dict):
            raise CorpusError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
        texts += [row[k] for k in CORPUS_FIELDS if isinstance(row.get(k), str) and row[k]]
    if not texts:
        raise CorpusError(f"{path}: no {'/'.join(CORPUS_FIELDS)} text to train a tokenizer on")
    return texts


def train_tokenizer(family_name: str, texts: Iterable[str], vocab_size: int | None = None):
    """Train a byte-level BPE tokenizer of exactly `vocab_size` ids (default: the family's tiny spec) on `texts`
    and wrap it as a transformers fast tokenizer carrying the family's chat template.

    Deterministic: the same texts in the same order give the same tokenizer.json.
    """
    from transformers import PreTrainedTokenizerFast

    family = get_family(family_name)
    vocab_size = vocab_size or family.spec("tiny").vocab_size
    specials = special_tokens(family_name)

    tok = Tokenizer(models.BPE(unk_token="<unk>"))  # byte-level: every byte has an id, <unk> is never produced
    # Digits one per token, as Gemma's own tokenizers split them: every number is spelled the same way wherever it
    # appears ("(20 bits)", "[19:0]"), which a small model needs to copy widths from a prompt into code.
    # add_prefix_space=False keeps decode(encode(text)) == text and offsets exact, with no extra leading space.
    digits = pre_tokenizers.Digits(individual_digits=True)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = pre_tokenizers.Sequence([digits, byte_level])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in specials],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    if tok.get_vocab_size() != vocab_size:
        raise CorpusError(
            f"the corpus only supports {tok.get_vocab_size()} tokens, not {vocab_size}: "
            "train the tokenizer on more text (a larger --corpus)"
        )
    bos = "<bos>"
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )

    extra = [t for t in specials if t not in BASE_SPECIAL_TOKENS]
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens=extra,
        clean_up_tokenization_spaces=False,  # decode must give back the exact text
        chat_template=chat_template(family_name),
    )


# The files a crosstune-built model folder's tokenizer is in (save_tokenizer writes the first three; a folder may hold
# its chat template beside them): what a folder built from another copies along (a drafter, the pretrained base).
TOKENIZER_FILE_NAMES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def save_tokenizer(tokenizer, out_dir: Path) -> list[Path]:
    """Write tokenizer.json, tokenizer_config.json (chat_template inside) and special_tokens_map.json."""
    out_dir = Path(out_dir)
    # The chat template goes into tokenizer_config.json, where every reader (old and new) looks.
    tokenizer.save_pretrained(out_dir, save_jinja_files=False)
    # transformers 5 writes its internal class name; the classic name loads in transformers 4 and 5 alike.
    config_path = out_dir / "tokenizer_config.json"
    config = read_json(config_path)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    special_map = {
        **{k: str(v) for k, v in tokenizer.special_tokens_map.items() if isinstance(v, str)},
        "additional_special_tokens": [str(t) for t in tokenizer.extra_special_tokens],
    }
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2, sort_keys=True) + "\n")
    return [out_dir / n for n in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")]
