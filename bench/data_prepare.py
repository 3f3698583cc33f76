"""Data preparation throughput: crosstune's `prepare_dataset` against TRL's own dataset preparation of the same
records (chat template + tokenize + completion mask + labels), measured in the same run; plus packing efficiency.

    .venv/bin/python bench/data_prepare.py                  # 2000 synthetic CodeV-R1 records, tiny Gemma 4 tokenizer
    .venv/bin/python bench/data_prepare.py --n 5000 --family gemma3 --max-seq-len 1024

crosstune is timed end to end (read JSONL, apply the column mapping and reasoning policy, render, tokenize, mask,
pack, write shards + manifest + stats + histogram) and on TRL's scope alone (render + tokenize + mask). TRL
(`SFTTrainer._prepare_dataset`, the code SFTTrainer runs on prompt/completion data) is given conversations already
formatted by crosstune, untimed, so its figure leaves out reading and formatting. The run also checks that both give
the same token ids and reports where their masks differ. Both run single-threaded (TOKENIZERS_PARALLELISM=false,
as `make` sets it) unless --parallel. Runs alternate; each figure is the best of --repeat runs, in wall and in
process-CPU seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="synthetic training records")
    parser.add_argument("--family", default="gemma4", choices=["gemma3", "gemma4"])
    parser.add_argument("--max-seq-len", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parallel", action="store_true", help="let the Rust tokenizer use its thread pool")
    args = parser.parse_args()
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if args.parallel else "false"  # before tokenizers is imported
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        run(Path(tmp), args)


def run(tmp: Path, args) -> None:
    import datasets
    import numpy as np
    import yaml

    from crosstune.data.bad_input import Ledger
    from crosstune.data.conversation import ConversationBuilder
    from crosstune.data.encode import ChatEncoder
    from crosstune.data.prepare import prepare_dataset
    from crosstune.data.prepared import load_tokenizer
    from crosstune.data.sources import read_split
    from crosstune.families import get_family
    from crosstune.models.tiny import build_tiny_model
    from crosstune.recipe import load_recipe
    from crosstune.synth import generate_corpus

    datasets.disable_progress_bars()
    generate_corpus(tmp / "corpus", n_train=args.n, n_eval=0, seed=0)
    build_tiny_model(args.family, tmp / "model", seed=0, corpus_dir=tmp / "corpus")
    recipe_file = tmp / "recipe.yaml"
    recipe_file.write_text(
        yaml.safe_dump(
            {
                "name": "bench",
                "output_dir": str(tmp / "runs"),
                "model": {"family": args.family, "path": str(tmp / "model")},
                "data": {"sources": [{"path": str(tmp / "corpus" / "train.jsonl")}], "max_seq_len": args.max_seq_len},
                "hardware": "cpu",
            }
        )
    )
    recipe = load_recipe(recipe_file)
    tok = load_tokenizer(recipe)
    chat = get_family(args.family).chat

    # The same conversations for TRL, formatted by crosstune (reasoning stripped) outside the timed region.
    ledger = Ledger(strict=True)
    builder = ConversationBuilder(recipe.data, (chat.turn_start, chat.turn_end), bool(chat.thought_start))
    convs = [builder.build(r, ledger) for r in read_split(recipe, "train", ledger)[0]]
    trl_data = datasets.Dataset.from_dict(
        {"prompt": [c.messages[:-1] for c in convs], "completion": [c.messages[-1:] for c in convs]}
    )

    encoder = ChatEncoder(tok, chat)

    def encode_only():  # the scope of TRL's figure: render, tokenize, mask (no reading, packing or writing)
        return [e for lo in range(0, len(convs), 256) for e in encoder.encode(convs[lo : lo + 256], Ledger(True))]

    runs = {"ours": [], "enc": [], "trl": [], "trlp": []}
    for _ in range(args.repeat):
        runs["ours"].append(timed(lambda: prepare_dataset(recipe, tokenizer=tok, force=True)))
        runs["enc"].append(timed(encode_only))
        runs["trl"].append(timed(lambda: trl_prepare(trl_data, tok, packing=False, max_len=args.max_seq_len)))
        runs["trlp"].append(timed(lambda: trl_prepare(trl_data, tok, packing=True, max_len=args.max_seq_len)))
    best = {name: min(r, key=lambda x: x[0]) for name, r in runs.items()}
    stats = runs["ours"][0][2].stats["splits"]["train"]
    tokens = stats["tokens"]
    packed = runs["trlp"][0][2]
    trl_eff = sum(map(sum, packed["seq_lengths"])) / (len(packed) * args.max_seq_len)

    # Do both sides train on the same tokens? Compare per record, unpacked.
    encoded, plain = runs["enc"][0][2], runs["trl"][0][2]
    same_ids = sum(e.ids.tolist() == row for e, row in zip(encoded, plain["input_ids"], strict=True))
    mask_diff = [
        np.nonzero(e.mask != (np.asarray(lbl) != -100))[0] for e, lbl in zip(encoded, plain["labels"], strict=True)
    ]
    extra = {tok.decode([int(e.ids[i])]) for e, d in zip(encoded, mask_diff, strict=True) for i in d}

    print(
        f"records {len(convs)}, tokens {tokens:,}, family {args.family}, max_seq_len {args.max_seq_len}, "
        f"tokenizer threads: {'pool' if args.parallel else 'one'}, best of {args.repeat}"
    )
    print(f"{'':44} {'wall s':>8} {'cpu s':>8} {'med cpu':>8} {'records/s':>10} {'tokens/s':>10}")
    labels = {
        "ours": "crosstune prepare (read → shards, packed)",
        "enc": "crosstune render + tokenize + mask only",
        "trl": "TRL _prepare_dataset (no packing)",
        "trlp": "TRL _prepare_dataset (packing=bfd)",
    }
    for key, label in labels.items():
        wall, cpu, _ = best[key]
        med = statistics.median(r[1] for r in runs[key])
        print(f"{label:44} {wall:8.2f} {cpu:8.2f} {med:8.2f} {len(convs) / wall:10.0f} {tokens / wall:10.0f}")
    short = {"ours": "prepare", "enc": "render+tokenize+mask", "trl": "TRL (no packing)", "trlp": "TRL (packing)"}
    for ours_key, trl_key in [("ours", "trl"), ("ours", "trlp"), ("enc", "trl")]:
        wall, cpu = best[trl_key][0] / best[ours_key][0], best[trl_key][1] / best[ours_key][1]
        paired = statistics.median(t[1] / o[1] for t, o in zip(runs[trl_key], runs[ours_key], strict=True))
        print(
            f"speed-up of crosstune {short[ours_key]} over {short[trl_key]}: best wall {wall:.2f}x, best cpu "
            f"{cpu:.2f}x, median of paired cpu ratios {paired:.2f}x"
        )
    print(
        f"packing efficiency (non-pad): crosstune {stats['packing_efficiency']:.1%} in {stats['rows']} rows, "
        f"TRL bfd {trl_eff:.1%} in {len(packed)} rows, one record per row {stats['padding_efficiency']:.1%}"
    )
    print(
        f"trained-token fraction {stats['trained_fraction']:.1%}; identical token ids on {same_ids}/{len(convs)} "
        f"records; mask differences: {sum(len(d) for d in mask_diff)} tokens ({sorted(extra)}: TRL's completion "
        "runs to the end of the text, so it also trains what the template writes after the end-of-turn token)"
    )


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def trl_prepare(dataset, tokenizer, packing: bool, max_len: int):
    """TRL's own preparation (the method SFTTrainer calls), without building a model around it."""
    from types import SimpleNamespace

    from trl import SFTConfig
    from trl.trainer.sft_trainer import SFTTrainer

    args = SFTConfig(
        output_dir="unused",
        max_length=max_len,
        packing=packing,
        padding_free=packing,
        completion_only_loss=True,
        bf16=False,
        use_cpu=True,
        report_to=[],
    )
    stand_in = SimpleNamespace(_tokenizer=tokenizer, completion_only_loss=True, chat_template=None)
    return SFTTrainer._prepare_dataset(stand_in, dataset, tokenizer, args, packing, None, "train")


if __name__ == "__main__":
    main()
