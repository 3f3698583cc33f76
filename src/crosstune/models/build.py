"""Random Gemma checkpoints of any size in the hub's layout: a family size with its layer count, vocabulary, dtype,
layout (text-only causal LM, or the official checkpoints' `*ForConditionalGeneration` with a small vision tower) and
shard count, plus a tokenizer of exactly that vocabulary trained locally (crosstune.models.tokenizer).

A 2-layer model of the 31B's true dimensions (hidden 5376, vocab 262,144) rehearses the real checkpoint on a CPU
(docs/BENCHMARKS.md, "Real-dimension rehearsal"); the tiny sizes are the tests' models. Two writers (`WRITERS`):
torch, transformers' own model classes and initialisation under `torch.manual_seed(seed)` with norms, layer scalars
and embeddings randomised (`randomise_scales`); numpy (models.numpy_weights), the same files of the text layout
without torch (a TPU host's jax-only install), its tensors named and shaped by the family's HF <-> Tunix table and
drawn by the same rules (models.build_rules). Either way the same arguments give byte-identical files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Iterator
from pathlib import Path

from crosstune import ownership
from crosstune.families import get_family
from crosstune.families.base import gemma_layer_pattern
from crosstune.families.spec import DTYPE_BYTES, ModelSpec
from crosstune.models.build_rules import (
    EMBED_STD,
    LAYER_SCALAR,
    ROUTER_STD,
    SCALE_JITTER,
    SCALES,
    SMALL_HIDDEN,
    ModelOptionError,
    exact_shard_limit,
)
from crosstune.models.tokenizer import corpus_texts, save_tokenizer, train_tokenizer
from crosstune.synth import generate_corpus
from crosstune.units import bytes_to_gb

# `crosstune model tiny|build` proves a folder its own by this manifest (hidden: an export copies a base's other
# files, never its hidden ones); it replaces nothing else.
MODEL = ownership.OutputKind("crosstune model", ".crosstune-model.json")
LAYOUTS = ("causal", "multimodal")
DTYPES = ("float32", "bfloat16")


# auto: torch where it imports (transformers' own init: the files every earlier build wrote, the tests' and the
# demo's models), numpy otherwise; numpy writes the text layout only (the multimodal one needs transformers' classes)
WRITERS = ("auto", "torch", "numpy")
# The corpus the tokenizer is trained on when none is given (fixed, so the tokenizer is too).
DEFAULT_CORPUS = {"n_train": 400, "n_eval": 0, "seed": 0}
# The official checkpoints' multimodal configs (the family's `HfArch` names the classes), with a one-layer vision
# tower or a small encoder-free vision embedder (the rehearsal needs its layout and its tensors beside the language
# model's, not its size). Media token ids lie past the text vocabulary.
MULTIMODAL = {
    "Gemma4Config": {
        "vision": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 16,
        },
        "media": ("image_token_id", "boi_token_id", "eoi_token_id", "video_token_id"),
        "extra": {"audio_config": None},
    },
    "Gemma4UnifiedConfig": {  # the 12B: patches -> LN -> Dense -> LN -> +posemb -> LN -> RMSNorm -> Linear
        # num_soft_tokens: the hub's config has it (280) and vLLM 0.32 reads it at start-up, text-only serving too;
        # transformers 5.12-5.19 keep it as an extra field
        "vision": {
            "patch_size": 4,
            "pooling_kernel_size": 2,
            "mm_embed_dim": 32,
            "mm_posemb_size": 16,
            "output_proj_dims": 32,
            "num_soft_tokens": 280,
        },
        "media": (
            "image_token_id",
            "boi_token_id",
            "eoi_token_id",
            "video_token_id",
            "boa_token_id",
            "eoa_token_index",
            "audio_token_id",
        ),
        "extra": {"audio_config": None},
    },
    "Gemma3Config": {
        "vision": {
            "model_type": "siglip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 56,
            "patch_size": 14,
            "vision_use_head": False,
        },
        "media": ("image_token_index", "boi_token_index", "eoi_token_index"),
        "extra": {"mm_tokens_per_image": 4},
    },
}


def build_bytes(spec: ModelSpec, dtype: str = "float32", shards: int = 1, writer: str = "torch") -> int:
    """The memory a build of `spec` holds at its peak. torch: every weight in float32 while transformers initialises
    it (the cast to `dtype` goes a parameter at a time); numpy: one shard and the tensor being drawn."""
    if writer == "numpy":
        from crosstune.models.numpy_weights import peak_bytes

        return peak_bytes(get_family(spec.family), spec, dtype, shards)
    return spec.total_params * DTYPE_BYTES["float32"]


def available_bytes() -> int | None:
    """This machine's available memory (/proc/meminfo's MemAvailable; None where it can't be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_problem(spec: ModelSpec, dtype: str, shards: int = 1, writer: str = "torch") -> str | None:
    """Why this machine can't hold a build of `spec` in `dtype` by `writer` (None: it can, or its memory can't be
    read). ShardCountError where the numpy writer can't split the tensors into `shards` files."""
    need, have = build_bytes(spec, dtype, shards, writer), available_bytes()
    if have is None or need <= have:
        return None
    size = f"{spec.name} ({spec.total_params:,} parameters)"
    free = f"this machine has {bytes_to_gb(have):.1f} GB available"
    how = f"in {shards} shard(s) with the numpy writer" if writer == "numpy" else "with the torch writer"
    return f"{size} needs about {bytes_to_gb(need):.1f} GB to build in {dtype} {how}; {free}"


def resolve_writer(writer: str, layout: str) -> str:
    """The writer that builds `layout` here ("torch" or "numpy"; `auto` picks as WRITERS says); ModelOptionError,
    naming what to install, where the one asked for or the layout's needs torch and torch does not import."""
    if writer not in WRITERS:
        raise ModelOptionError(f"--writer {writer!r}: one of {', '.join(WRITERS)}")
    if writer == "numpy" and layout != "causal":
        raise ModelOptionError(f"--writer numpy writes --layout causal only: --layout {layout} needs --writer torch")
    if writer == "auto":
        writer = "torch" if _torch_imports() else "numpy"
    if writer == "numpy" and layout != "causal":
        raise ModelOptionError(
            f"--layout {layout} is built with transformers' model classes, which need torch: install the torch stack "
            "(pip install -r requirements.lock), or build --layout causal without it"
        )
    if writer == "torch" and not _torch_imports():
        raise ModelOptionError(
            "--writer torch: torch does not import here: install the torch stack (pip install -r requirements.lock), "
            "or give --writer numpy"
        )
    return writer


def _torch_imports() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def sized_spec(family: str, size: str, layers: int | None = None, vocab: int | None = None) -> ModelSpec:
    """`family.spec(size)` with another layer count and/or vocabulary. The layer pattern keeps the size's period
    (5 sliding : 1 global; E2B's 4 : 1); a model shorter than one period ends with a global layer, so every layer
    type is present (2 layers: one sliding, one global). KV-shared layers keep about the size's fraction, at the
    nearest count both stacks share alike (`Family.shallow_kv_shared`)."""
    fam = get_family(family)
    spec = fam.spec(size)
    changes: dict = {}
    if layers is not None:
        if layers < 1:
            raise ValueError(f"layers must be at least 1, got {layers}")
        period = spec.layer_types.index("global") + 1 if "global" in spec.layer_types else 6
        types = gemma_layer_pattern(layers, period)
        types = types if "global" in types or layers == 1 else (*types[:-1], "global")
        changes["layer_types"] = types
        changes["name"] = f"{spec.name}-{layers}l"
        changes["kv_shared_layers"] = fam.shallow_kv_shared(spec, types)
    if vocab is not None:
        changes["vocab_size"] = vocab
    return dataclasses.replace(spec, **changes) if changes else spec


def build_checkpoint(
    family: str,
    out_dir: Path,
    *,
    size: str = "tiny",
    layers: int | None = None,
    vocab: int | None = None,
    layout: str = "causal",
    dtype: str = "float32",
    shards: int = 1,
    seed: int = 0,
    corpus_dir: Path | None = None,
    writer: str = "auto",
    say=lambda message: None,
) -> Path:
    """Write a random `family` checkpoint of `size` into `out_dir` (see the module docstring) with `writer`.

    Files: config.json, model.safetensors or `shards` model-0000k-of-0000N.safetensors files with their index,
    generation_config.json (eos = [<eos>, turn end]), tokenizer.json, tokenizer_config.json (with the family's chat
    template) and special_tokens_map.json. The tokenizer is trained on `corpus_dir/train.jsonl`, or on a small
    synthetic corpus with a fixed seed when `corpus_dir` is None. `say` hears each phase (progress)."""
    import transformers  # its configs, tokenizers and GenerationConfig import without torch

    if layout not in LAYOUTS or dtype not in DTYPES or shards < 1:
        raise ValueError(f"layout in {LAYOUTS}, dtype in {DTYPES}, shards >= 1; got {layout!r}, {dtype!r}, {shards}")
    writer = resolve_writer(writer, layout)
    fam = get_family(family)
    spec = sized_spec(family, size, layers, vocab)
    out_dir = Path(out_dir)

    say(f"training a {spec.vocab_size:,}-entry tokenizer")
    tokenizer = _tokenizer(family, spec.vocab_size, corpus_dir)
    named = {"pad": "<pad>", "eos": "<eos>", "bos": fam.chat.bos, "turn_end": fam.chat.turn_end}
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in named.items()}
    hf = fam.hf_config(
        spec,
        vocab_size=len(tokenizer),
        pad_token_id=ids["pad"],
        bos_token_id=ids["bos"],
        eos_token_id=[ids["eos"], ids["turn_end"]],
        dtype=dtype,
    )
    text_class = transformers.CONFIG_MAPPING[hf.pop("model_type")]
    text_config = text_class(**hf)  # layer_types at construction: setting it later leaves derived fields stale
    generation = transformers.GenerationConfig(
        bos_token_id=ids["bos"], eos_token_id=[ids["eos"], ids["turn_end"]], pad_token_id=ids["pad"]
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    if writer == "numpy":
        say(f"drawing {spec.name} ({layout}, {dtype}) with numpy")
        text_config.save_pretrained(out_dir)  # what the torch writer's save_pretrained writes, byte for byte
        generation.save_pretrained(out_dir)
        from crosstune.models.numpy_weights import write_numpy_weights

        std = text_config.initializer_range or 0.02  # transformers' _init_weights: the same fallback
        write_numpy_weights(
            fam, spec, out_dir, dtype=dtype, shards=shards, seed=seed, std=std, pad_token_id=ids["pad"], say=say
        )
    else:
        _write_torch(fam, spec, text_config, generation, len(tokenizer), out_dir, layout, dtype, shards, seed, say)
    save_tokenizer(tokenizer, out_dir)
    return out_dir


def _write_torch(fam, spec, text_config, generation, vocab, out_dir, layout, dtype, shards, seed, say) -> None:
    """The weights and configs by transformers' model class of `layout`, initialised under `torch.manual_seed(seed)`,
    saved by save_pretrained."""
    import torch
    import transformers

    arch = fam.hf_arch(spec)
    if layout == "multimodal":
        mm = MULTIMODAL[arch.multimodal_config]
        media = {name: vocab + i for i, name in enumerate(mm["media"])}
        text = {k: v for k, v in text_config.to_dict().items() if k != "architectures"}  # the hub's configs: none
        config = getattr(transformers, arch.multimodal_config)(
            text_config=text, vision_config=mm["vision"], **mm["extra"], **media
        )
        config.dtype = dtype
        model_class = getattr(transformers, arch.multimodal_model)
    else:
        config, model_class = text_config, getattr(transformers, arch.causal_lm_class)

    say(f"initialising {spec.name} ({layout}, {dtype})")
    torch.manual_seed(seed)
    with _default_dtype(getattr(torch, dtype)):  # params born in the checkpoint's dtype: no fp32 copy of a big model
        model = model_class(config).to(getattr(torch, dtype)).eval()
    randomise_scales(model)
    model.generation_config = generation

    say(f"writing {shards} shard(s)")
    if shards == 1:
        model.save_pretrained(out_dir, safe_serialization=True)
    else:
        model.save_pretrained(out_dir, safe_serialization=True, max_shard_size=shard_size_for(model, shards))


def randomise_scales(model) -> None:
    """Norm weights, layer scalars and (small models') embeddings away from their init values, drawn from the global
    torch RNG.

    At init every norm is the identity (Gemma 3 stores w=0 for x*(1+w), Gemma 4 w=1 for x*w) and every layer scalar
    is 1, so a converter that drops or swaps them would still match; random values make such a mistake visible. The
    MoE's extra norms (`*_layernorm_1/_2`) and router scales too: with them at 1, routing on the normed expert input
    or on the residual picks the same experts (tunix 0.1.7 does the former, crosstune.train.jax.moe).
    """
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if SCALES.search(name):
                param.add_(torch.empty_like(param).uniform_(-SCALE_JITTER, SCALE_JITTER))
        for name, buf in model.named_buffers():
            if name.endswith("layer_scalar"):
                buf.uniform_(*LAYER_SCALAR)
        if model.config.get_text_config().hidden_size <= SMALL_HIDDEN:
            model.get_input_embeddings().weight.normal_(0.0, EMBED_STD)
        for name, param in model.named_parameters():
            if name.endswith("router.proj.weight"):
                param.normal_(0.0, ROUTER_STD)


def shard_size_for(model, shards: int) -> int:
    """The smallest `max_shard_size` (bytes) for which save_pretrained writes exactly `shards` files
    (build_rules.exact_shard_limit). The tensors are the ones it saves, prepared by its own steps (tied weights once,
    keys back in the checkpoint's format and order: Gemma 3's multimodal class saves `language_model.model.*`) and
    split by huggingface_hub's splitter, as save_pretrained does (transformers 5.12)."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    state = revert_weight_conversion(model, remove_tied_weights_from_state_dict(model.state_dict(), model))

    def count(limit: int) -> int:
        return len(split_torch_state_dict_into_shards(state, max_shard_size=limit).filename_to_tensors)

    return exact_shard_limit(count, sum(t.numel() * t.element_size() for t in state.values()), shards)


def _tokenizer(family: str, vocab_size: int, corpus_dir: Path | None):
    """The tokenizer trained on the corpus; when it holds too little text for `vocab_size` entries (a real
    vocabulary of 262,144), seeded pseudo-words are added to the training text: the extra entries are learned
    from them, so the corpus's own text tokenizes much as with a smaller vocabulary."""
    if corpus_dir is None:
        with tempfile.TemporaryDirectory(prefix="crosstune-corpus-") as tmp:
            generate_corpus(Path(tmp), **DEFAULT_CORPUS)
            texts = corpus_texts(Path(tmp))
    else:
        texts = corpus_texts(Path(corpus_dir))
    try:
        return train_tokenizer(family, texts, vocab_size=vocab_size)
    except ValueError:
        return train_tokenizer(family, texts + pseudo_words(vocab_size), vocab_size=vocab_size)


def pseudo_words(n: int, seed: int = 0) -> list[str]:
    """`n` seeded random lowercase words of 5-12 letters, 1000 to a line (enough distinct pairs for n merges)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    words = [letters[rng.integers(0, 26, length)].tobytes().decode() for length in rng.integers(5, 13, n)]
    return [" ".join(words[i : i + 1000]) for i in range(0, n, 1000)]


@contextlib.contextmanager
def _default_dtype(dtype) -> Iterator[None]:
    import torch

    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
