"""Torch training throughput: `crosstune train --backend torch` against plain TRL SFTTrainer + PEFT given the same
model, rows and hyper-parameters, in one run; plus padding-free against padded batches.

    .venv/bin/python bench/train_torch.py                       # tiny Gemma 4, 12 steps × 4 rows of ≤ 512 tokens
    .venv/bin/python bench/train_torch.py --family gemma3 --steps 20 --threads 1

Four runs, alternating, --repeat times each, on the same prepared rows in the same order (the shared row order,
sequential sampler), same LoRA, AdamW, schedule, batch and accumulation:
  crosstune / packed          crosstune's backend: packed rows, padding-free (the recipe default)
  TRL / packed                SFTTrainer + PEFT on the same packed rows, padding_free=True, TRL defaults otherwise
  TRL / unpacked padding-free one document per row; TRL's collator flattens the batch into one row
  TRL / unpacked padded       one document per row; TRL's default collator pads to the longest + attention mask
crosstune vs TRL = the first two (same rows, same padding-free batches: what crosstune adds costs this much);
padding-free vs padded = the last two (same code, same rows).
Throughput = trained tokens of steps 2..N / time from the end of step 1 to the end of step N (step 1 warms up), in
wall time and in process CPU time (steadier on a shared machine); the same clock callback times both sides.
crosstune's own per-step metrics (metrics.jsonl) are checked against the same token count. Threads are fixed. Each
figure is the best of --repeat runs; the ratios also give the median of the per-repeat (paired) CPU ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

RECIPE = """\
name: bench-{family}-{layout}
output_dir: {root}/runs
model: {{family: {family}, path: {model}, dtype: float32}}
lora: {{rank: 16, alpha: 32, dropout: 0.0}}
data:
  sources: [{{path: {corpus}/train.jsonl}}]
  max_seq_len: 512
  packing: {packing}
  strict: false
  subsample: {{size: {records}, seed: 42}}
train:
  max_steps: {steps}
  learning_rate: 2.0e-3
  schedule: cosine
  warmup_steps: 2
  weight_decay: 0.001
  per_device_batch_size: 2
  grad_accumulation: 2
  gradient_checkpointing: false
  precision: fp32
  log_every: 1
  checkpoint_every: 100000
  keep_last: 1
hardware: cpu
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="gemma4", choices=["gemma3", "gemma4"])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--records", type=int, default=96, help="synthetic records to prepare (subsample)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # busy-waiting OpenMP is 10x slower on shared cores
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-train-torch-") as tmp:
        run(Path(tmp), args)


def setup(root: Path, args) -> dict:
    from crosstune.data import prepare_dataset
    from crosstune.models.tiny import build_tiny_model
    from crosstune.recipe import load_recipe
    from crosstune.synth import generate_corpus

    corpus, model = root / "corpus", root / "model"
    generate_corpus(corpus, n_train=max(200, args.records), n_eval=4, seed=0)
    build_tiny_model(args.family, model, seed=0, corpus_dir=corpus)
    recipes = {}
    for layout, packing in (("packed", "true"), ("unpacked", "false")):
        path = root / f"{layout}.yaml"
        fields = dict(family=args.family, layout=layout, root=root, model=model, corpus=corpus, packing=packing)
        path.write_text(RECIPE.format(**fields, records=args.records, steps=args.steps))
        recipes[layout] = load_recipe(path)
        prepare_dataset(recipes[layout])
    return recipes


def step_tokens(recipe) -> list[int]:
    """Trained tokens per optimizer step: step s reads rows [s·G, (s+1)·G) of the shared order."""
    from crosstune.data import load_prepared, torch_dataset

    t = recipe.train
    g = t.per_device_batch_size * t.grad_accumulation
    rows = torch_dataset(load_prepared(recipe), "train", seed=t.seed, epochs=8)
    counts = []
    for s in range(t.max_steps):
        batch = rows.select(range(s * g, (s + 1) * g))
        n = 0
        for labels, lengths in zip(batch["labels"], batch["seq_lengths"], strict=True):
            start = 0
            for length in lengths:  # a document's first token is never a target
                n += sum(x != -100 for x in labels[start + 1 : start + length])
                start += length
        counts.append(n)
    return counts


def step_clock():
    """A TrainerCallback noting (wall, process CPU) time at the end of every optimizer step."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self):
            self.ends: list[tuple[float, float]] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append((time.perf_counter(), time.process_time()))

        def span(self) -> tuple[float, float]:
            (w0, c0), (w1, c1) = self.ends[0], self.ends[-1]
            return w1 - w0, c1 - c0

    return StepClock()


def crosstune_run(recipe, run_dir: Path) -> tuple[tuple[float, float], list[dict]]:
    """crosstune's train(), with the same clock added to its trainer (the only change to it)."""
    from crosstune.run.metrics import read_metrics
    from crosstune.train.parts import torch_trainer_callbacks
    from crosstune.train.session import train

    clock = step_clock()
    with torch_trainer_callbacks(clock):
        train(recipe, run_dir, progress=False, backend="torch")
    return clock.span(), read_metrics(run_dir)


def plain_trl_run(recipe, out: Path, padding_free: bool) -> tuple[float, float]:
    """What a TRL user writes for these rows: load, LoraConfig, SFTConfig with the same hyper-parameters."""
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from crosstune.data import load_prepared, torch_dataset
    from crosstune.recipe import resolve_path

    t = recipe.train
    path = resolve_path(recipe, recipe.model.path)
    rows = torch_dataset(load_prepared(recipe), "train", seed=t.seed, epochs=8)
    if not padding_free:
        rows = rows.remove_columns(["seq_lengths", "position_ids"])
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    lora = LoraConfig(
        r=recipe.lora.rank,
        lora_alpha=recipe.lora.alpha,
        lora_dropout=recipe.lora.dropout,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        task_type="CAUSAL_LM",
    )
    config = SFTConfig(
        output_dir=str(out),
        max_steps=t.max_steps,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.schedule,
        warmup_steps=t.warmup_steps,
        weight_decay=t.weight_decay,
        per_device_train_batch_size=t.per_device_batch_size,
        gradient_accumulation_steps=t.grad_accumulation,
        gradient_checkpointing=t.gradient_checkpointing,
        bf16=False,
        use_cpu=True,
        logging_steps=t.log_every,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=t.seed,
        max_length=None,
        padding_free=padding_free,
        train_sampling_strategy="sequential",  # the same rows as crosstune, step for step
    )
    clock = step_clock()
    tokenizer = AutoTokenizer.from_pretrained(path)
    trainer = SFTTrainer(
        model, config, train_dataset=rows, processing_class=tokenizer, peft_config=lora, callbacks=[clock]
    )
    trainer.train()
    return clock.span()


def run(root: Path, args) -> None:
    import torch

    recipes = setup(root, args)
    tokens = {layout: step_tokens(r) for layout, r in recipes.items()}
    cases = {
        "crosstune / packed": lambda i: crosstune_run(recipes["packed"], root / f"ct-packed-{i}"),
        "TRL / packed": lambda i: plain_trl_run(recipes["packed"], root / f"trl-packed-{i}", padding_free=True),
        "TRL / unpacked padding-free": lambda i: plain_trl_run(recipes["unpacked"], root / f"trl-pf-{i}", True),
        "TRL / unpacked padded": lambda i: plain_trl_run(recipes["unpacked"], root / f"trl-pad-{i}", False),
    }
    layout_of = {name: "packed" if "/ packed" in name else "unpacked" for name in cases}
    wall: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(args.repeat):
        for name, fn in cases.items():
            out = fn(i)
            if name.startswith("crosstune"):
                out, rows = out
                assert [r.trained_tokens for r in rows] == tokens[layout_of[name]], f"{name}: token counts differ"
            wall[name].append(out[0])
            cpu[name].append(out[1])
            print(f"  run {i + 1}/{args.repeat} {name}: {out[0]:.2f} s wall, {out[1]:.2f} s CPU", flush=True)

    def rates(times: dict[str, list[float]]) -> dict[str, float]:
        return {n: sum(tokens[layout_of[n]][1:]) / min(s) for n, s in times.items()}

    rate, cpu_rate = rates(wall), rates(cpu)
    t = recipes["packed"].train
    print(
        f"\n{args.family} tiny, {args.steps} steps of {t.per_device_batch_size}×{t.grad_accumulation} rows ≤ "
        f"{recipes['packed'].data.max_seq_len} tokens, {args.threads} threads, torch {torch.__version__}"
    )
    print(f"{'what':28} {'best wall s':>12} {'trained tok/s':>14} {'best CPU s':>11} {'tok/CPU-s':>10}   wall runs")
    for name in cases:
        runs = ", ".join(f"{x:.2f}" for x in wall[name])
        w, c = min(wall[name]), min(cpu[name])
        print(f"{name:28} {w:12.2f} {rate[name]:14.0f} {c:11.2f} {cpu_rate[name]:10.0f}   {runs}")
    print("\nratios of trained tokens/s: best wall, best CPU, median of paired CPU ratios")
    for label, a, b in (
        ("crosstune / plain TRL (same packed rows)", "crosstune / packed", "TRL / packed"),
        ("padding-free / padded (same unpacked rows, TRL)", "TRL / unpacked padding-free", "TRL / unpacked padded"),
        ("packed / unpacked rows (padding-free, TRL)", "TRL / packed", "TRL / unpacked padding-free"),
    ):
        per_token = sum(tokens[layout_of[a]][1:]) / sum(tokens[layout_of[b]][1:])
        paired = statistics.median(per_token * y / x for x, y in zip(cpu[a], cpu[b], strict=True))
        print(f"  {label:50} {rate[a] / rate[b]:.2f}×, {cpu_rate[a] / cpu_rate[b]:.2f}×, {paired:.2f}×")


if __name__ == "__main__":
    main()
