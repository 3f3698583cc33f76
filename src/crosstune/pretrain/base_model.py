"""A small base that writes some Verilog: the demo's Gemma 4 ("small" spec, every 31B layout peculiarity kept)
trained in full, on CPU, on part of the synthetic Verilog task kinds, cached in a content-addressed folder.

Only the base's task kinds (BASE_KINDS) reach the base, neither its tokenizer nor its weights see the
held-out ones: the demo's LoRA teaches those, and its evaluation problems come from them.

Training is a plain torch loop over the project's own prepared rows (`prepare_dataset`, the chat template and
loss masks the LoRA runs use) rather than TRL's SFTTrainer: full fine-tuning of a 1.6M-parameter throwaway base
needs no checkpoints, resume, FSDP or logging callbacks, and a fixed batch order under one seed keeps it
deterministic on a given machine and thread count.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from crosstune.fsutil import cache_home
from crosstune.synth.tasks import TASK_KINDS

# The task kinds the base learns, in registry order: every synthetic task kind but the four the demo's LoRA teaches and
# scores (crosstune.demo.split.HELD_OUT_KINDS, checked disjoint there) and the longest one (Moore/Mealy FSMs:
# ~700-token records, twice the rest). Listed, not derived: they name the shipped base (its cache key).
BASE_KINDS = (
    "boolean_function", "mux", "priority_encoder", "adder", "comparator", "alu", "counter", "clock_divider",
    "shift_register", "edge_detector", "register_file",
)  # fmt: skip

PRETRAIN_VERSION = 2  # bump when the loop, the tokenizer or the saved layout changes: it is part of the cache key
DONE = "pretrain.json"  # written last into a finished base: its config, losses and timing
# The default base, shipped in the package (6.6 MB) so a first demo needs no pretraining: the folder is named by
# its cache key, so it is used only while every input (config, corpus, shape, versions) is the same; the slow test
# tests/pretrain/test_pretrain.py rebuilds it and compares the bytes.
SHIPPED_BASES = Path(__file__).parent / "pretrained"
# Torch threads of the pretraining loop: a float sum's order, so the weights' bits, depend on the thread count;
# fixed, so a rebuild on any machine of this kind gives the shipped bytes (and a 1-core machine just runs slower).
PRETRAIN_THREADS = 2
# How the base's training text is formatted. The pretraining borrows the demo recipe's file for a valid recipe, but
# the cache key does not hash that file: these settings are the ones the shipped base was built with, stated here so
# an edit of the demo's LoRA data settings (its answer_markup: tags) leaves the base, and its key, as they are.
BASE_TEXT = (
    "data.columns={preset: codev_r1}",
    "data.system_prompt={policy: keep}",
    "data.reasoning=strip",
    "data.answer_markup=plain",
    "data.truncation=drop",
    "data.packing=false",  # one record per row: no attention across records without a packed-attention kernel
)


@dataclass(frozen=True)
class PretrainConfig:
    family: str = "gemma4"
    size: str = "small"
    task_kinds: tuple[str, ...] = BASE_KINDS  # the Verilog task kinds of its corpus (family: the Gemma one)
    n_records: int = 2400
    corpus_seed: int = 1000  # distinct from the demo corpus's seeds, which draw the held-out task kinds
    seed: int = 0
    steps: int = 1200
    batch_size: int = 8
    learning_rate: float = 3e-3
    warmup_steps: int = 25
    max_seq_len: int = 1024
    # bf16 autocast (fp32 master weights, fp32 loss): ~1.3x the fp32 step on this CPU kind (AVX-512 BF16), which
    # buys the steps the base needs; still deterministic on a given machine and thread count.
    precision: str = "bf16"
    extra: dict = field(default_factory=dict)  # room for experiment knobs without a schema change


def default_cache_root() -> Path:
    """Bases go under pretrained/ in crosstune's cache (fsutil.cache_home)."""
    return cache_home() / "pretrained"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def config_record(config: PretrainConfig) -> dict:
    """The config as the cache key and pretrain.json record it. Its names are fixed (the shipped base is named by a
    hash of them): the task kinds are recorded under "families", their name when the base was built."""
    return {("families" if name == "task_kinds" else name): value for name, value in asdict(config).items()}


def cache_key(config: PretrainConfig, corpus_sha256: str) -> str:
    """The folder name: a hash of everything the weights depend on (config, model shape, training text, versions)."""
    import tokenizers
    import torch
    import transformers

    from crosstune.families import get_family

    family = get_family(config.family)
    inputs = {
        "config": config_record(config),
        "model": family.hf_config(family.spec(config.size)),
        "corpus_sha256": corpus_sha256,
        "pretrain_version": PRETRAIN_VERSION,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "threads": PRETRAIN_THREADS,
    }
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{config.family}-{config.size}-{digest}"


def pretrained_base(
    config: PretrainConfig = PretrainConfig(),
    cache_root: Path | None = None,
    log: Callable[[str], None] = print,
    *,
    shipped: bool = True,
) -> Path:
    """The base for `config`: the one shipped with crosstune when its inputs are these (`shipped=False` ignores
    it), else the cached one under `cache_root`, trained first when no finished one exists there."""
    import tempfile

    from crosstune.fsutil import staged_dir
    from crosstune.synth import generate_corpus

    cache_root = Path(cache_root or default_cache_root())
    with tempfile.TemporaryDirectory(prefix="crosstune-pretrain-") as tmp:
        corpus = Path(tmp) / "corpus"
        generate_corpus(
            corpus, n_train=config.n_records, n_eval=0, seed=config.corpus_seed, task_kinds=config.task_kinds
        )
        key = cache_key(config, _sha256(corpus / "train.jsonl"))
        if shipped and (SHIPPED_BASES / key / DONE).is_file():
            return SHIPPED_BASES / key
        dest = cache_root / key
        if (dest / DONE).is_file():
            return dest
        log(f"pretraining the base into {dest} ({config.steps} steps; once, then cached)")
        with staged_dir(dest, may_replace=lambda _: None) as out, torch_threads(PRETRAIN_THREADS):
            _pretrain(config, corpus, Path(tmp), out, log)
    return dest


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op thread count set to `n` inside the block, restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _length_batched(perm, lengths, batch_size: int, rng) -> list[int]:
    """`perm` regrouped so each batch holds rows of similar length (less padding: ~30% fewer tokens per step):
    pools of 8 batches are sorted by length, cut into batches, and the batches shuffled."""
    pool = 8 * batch_size
    batches = []
    for start in range(0, len(perm), pool):
        chunk = sorted(perm[start : start + pool].tolist(), key=lambda i: lengths[i])
        batches += [chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size)]
    return [i for b in rng.permutation(len(batches)) for i in batches[b]]


def base_recipe(config: PretrainConfig, init: Path, corpus: Path, work: Path):
    """The recipe whose data section formats the base's training text: the demo recipe's file with the model, the
    corpus and BASE_TEXT put in (its LoRA, train and eval sections are not read by the pretraining loop)."""
    from crosstune.recipe import load_recipe
    from crosstune.recipes import shipped_recipe

    return load_recipe(
        shipped_recipe("demo-cpu.yaml"),
        [
            f"model.path={init}",
            f"model.family={config.family}",
            f"model.size={config.size}",
            f"data.sources=[{{path: {corpus / 'train.jsonl'}}}]",
            f"data.max_seq_len={config.max_seq_len}",
            *BASE_TEXT,
            f"output_dir={work / 'runs'}",
        ],
    )


def _pretrain(config: PretrainConfig, corpus: Path, work: Path, out: Path, log: Callable[[str], None]) -> None:
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from crosstune.data import prepare_dataset
    from crosstune.models.tiny import build_tiny_model
    from crosstune.models.tokenizer import TOKENIZER_FILE_NAMES

    if config.precision not in ("bf16", "fp32"):
        raise ValueError(f"PretrainConfig.precision is {config.precision!r}: use 'bf16' or 'fp32'")
    init = build_tiny_model(config.family, work / "init", seed=config.seed, corpus_dir=corpus, size=config.size)
    recipe = base_recipe(config, init, corpus, work)
    split = prepare_dataset(recipe, force=True, out_dir=work / "prepared").split("train")

    torch.manual_seed(config.seed)
    model = AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)

    def lr_at(step: int) -> float:  # linear warmup, cosine decay to 10%
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    rng = np.random.default_rng(config.seed)
    lengths = (split.rows(range(len(split)))["segment_ids"] > 0).sum(axis=1)
    order: list[int] = []
    losses: list[float] = []
    t0 = time.perf_counter()
    for step in range(config.steps):
        while len(order) < config.batch_size:  # epochs in a seeded order, batched by similar length
            order += _length_batched(rng.permutation(len(split)), lengths, config.batch_size, rng)
        picked, order = order[: config.batch_size], order[config.batch_size :]
        rows = split.rows(picked)
        length = int((rows["segment_ids"] > 0).sum(axis=1).max())  # rows are right-padded: trim to the longest
        ids = torch.from_numpy(rows["input_ids"][:, :length].astype(np.int64))
        attention = torch.from_numpy((rows["segment_ids"][:, :length] > 0).astype(np.int64))
        trained = torch.from_numpy(rows["loss_mask"][:, :length].astype(bool))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.precision == "bf16"):
            loss = model(input_ids=ids, attention_mask=attention, labels=ids.masked_fill(~trained, -100)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 5))
        if step % 25 == 0 or step == config.steps - 1:
            log(f"  step {step + 1}/{config.steps}  loss {losses[-1]:.3f}  ({time.perf_counter() - t0:.0f} s)")

    model.eval().save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILE_NAMES:
        if (init / name).is_file():
            (out / name).write_bytes((init / name).read_bytes())
    summary = {
        "config": config_record(config),
        "families_not_seen": [f.name for f in TASK_KINDS if f.name not in config.task_kinds],
        "corpus_sha256": _sha256(corpus / "train.jsonl"),
        "losses": losses,
        "seconds": round(time.perf_counter() - t0, 1),
        "threads": torch.get_num_threads(),
    }
    (out / DONE).write_text(json.dumps(summary, indent=1) + "\n")
