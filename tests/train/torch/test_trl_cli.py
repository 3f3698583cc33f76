"""crosstune's torch backend is TRL underneath; this shows it, and that every exported TRL config starts under TRL's own
CLI, packed or not. One recipe on the tiny Gemma 4 (named by hub id, read
from a hub-layout cache) trains with `crosstune train --backend torch`, and its `recipe export --to trl` config
trains with TRL's own CLI, `trl sft --config`, at the same time in another process. Compared: the tokens of step 1,
the trained tokens, the first step's loss and the LoRA's shapes and targets.

What differs by construction, named and measured here (docs/BACKEND_EQUIVALENCE.md, "crosstune's torch leg and TRL's
CLI", says what it costs):
- The newline Gemma's template writes after each end-of-turn marker: TRL's completion mask covers the rendered
  completion to its end, crosstune's ends at the marker (the newline stays untrained context). TRL trains one token
  more per conversation; its loss is the mean over those too, which the test reproduces from the base model's own
  cross-entropy on the newlines.
- Packing: TRL packs with best-fit-decreasing when it loads the data, crosstune in its own seeded order, so a step's
  rows hold different conversations whenever the data spans several steps. Here every conversation fits one row on
  both sides, so step 1 trains the same tokens.
- The LoRA's initial A: crosstune installs its one seeded draw, PEFT draws its own; B is 0 on both, so step 1's loss
  is the base model's on both sides, and later steps are not compared.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import torch
import yaml
from safetensors import safe_open

from crosstune.recipe import load_recipe, model_path
from crosstune.recipe.convert import export_recipe
from crosstune.run.layout import ADAPTER
from crosstune.run.metrics import read_metrics
from crosstune.run.records import read_run_record
from crosstune.train.session import train
from tests.helpers.hub_cache import put_in_hub_cache

MODEL = "acme/gemma-4-tiny-it"
ROW = 2048  # tokens per packed row: every conversation below fits one
RECIPE = f"""\
name: port
output_dir: runs
model: {{family: gemma4, path: "hf://{MODEL}", dtype: float32}}
lora: {{rank: 8, alpha: 16.0, dropout: 0.0}}
data:
  sources: [{{path: data.jsonl}}]
  columns: {{preset: prompt_completion}}
  reasoning: keep_inline
  max_seq_len: {ROW}
  truncation: truncate
  packing: true
train:
  max_steps: 1
  learning_rate: 1.0e-3
  schedule: constant
  per_device_batch_size: 1
  global_batch_size: 1
  gradient_checkpointing: false
  precision: fp32
  checkpoint_every: 1
hardware: cpu
"""
# fp32 on one CPU, the same kernels (sdpa) over rows of different order: a loss is a mean over T trained tokens of
# a log-sum-exp over V = 1024 logits, each rounded at u = 2^-24, errors adding like a random walk: √(V·T)·u relative.
UNIT_ROUNDOFF = 2.0**-24


def conversations(corpus: Path, tokenizer, out: Path) -> list[list[int]]:
    """The shortest synthetic records as TRL's conversational prompt/completion (reasoning markup removed), as many
    as fit one row; returns each one's token ids as the template renders it."""
    rows = [json.loads(line) for line in (corpus / "train.jsonl").read_text().splitlines()]
    chats = []
    for r in rows:
        answer = re.sub(r"</?answer>", "", re.sub(r"<think>.*?</think>", "", r["response"], flags=re.S)).strip()
        prompt = [{"role": "system", "content": r["system"]}, {"role": "user", "content": r["prompt"]}]
        chats.append({"prompt": prompt, "completion": [{"role": "assistant", "content": answer}]})
    ids = [tokenizer.apply_chat_template(c["prompt"] + c["completion"], return_dict=True)["input_ids"] for c in chats]
    chosen, total = [], 0
    for i in sorted(range(len(chats)), key=lambda i: len(ids[i])):
        if total + len(ids[i]) > ROW - 64:
            break
        chosen, total = [*chosen, i], total + len(ids[i])
    out.write_text("".join(json.dumps(chats[i]) + "\n" for i in sorted(chosen)))
    return [ids[i] for i in sorted(chosen)]


def adapter_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    with safe_open(folder / "adapter_model.safetensors", "pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 - safe_open has no iteration


def trl_rows(config: Path) -> list[dict]:
    """The rows TRL prepares from the exported config's data: TRL's own parser (every key must be TRL's) and
    SFTTrainer's dataset preparation."""
    from trl import SFTTrainer, get_dataset, get_peft_config
    from trl.scripts.sft import make_parser

    _, args, model_args, mixture = make_parser().parse_args_and_config(
        ["--config", str(config)], fail_with_unknown_args=True
    )
    trainer = SFTTrainer(
        model=model_args.model_name_or_path,
        args=args,
        train_dataset=get_dataset(mixture)["train"],
        peft_config=get_peft_config(model_args),
    )
    return list(trainer.train_dataset)


def trl_trained_tokens(config: Path) -> tuple[int, list[int]]:
    """(trained tokens, conversations per row) of the exported config's data as TRL prepares it."""
    rows = trl_rows(config)
    return sum(sum(label != -100 for label in r["labels"]) for r in rows), [len(r["seq_lengths"]) for r in rows]


def test_crosstune_s_torch_leg_against_trl_s_own_cli(
    hub_cache, tiny_gemma4_dir, synth_corpus_dir, tmp_path, monkeypatch
):
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    commit = put_in_hub_cache(hub_cache, MODEL, tiny_gemma4_dir)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # TRL's accelerate launch finds no user config here
    base = hub_cache / f"models--{MODEL.replace('/', '--')}" / "snapshots" / commit
    tokenizer = AutoTokenizer.from_pretrained(base)
    ids = conversations(synth_corpus_dir, tokenizer, tmp_path / "data.jsonl")
    (tmp_path / "recipe.yaml").write_text(RECIPE)
    config = tmp_path / "trl.yaml"
    config.write_text(export_recipe(tmp_path / "recipe.yaml", "trl")[0])

    log = tmp_path / "trl.log"
    with open(log, "w") as out:  # TRL's CLI in its own process while crosstune trains in this one
        trl = subprocess.Popen(
            [str(Path(sys.executable).parent / "trl"), "sft", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            recipe = load_recipe(tmp_path / "recipe.yaml")
            assert model_path(recipe) == base
            result = train(recipe, tmp_path / "run", backend="torch", progress=False)
        finally:
            code = trl.wait(timeout=600)
    assert code == 0, log.read_text()[-3000:]
    ours = read_metrics(tmp_path / "run")[0]
    theirs = json.loads((tmp_path / "port-trl" / "checkpoint-1" / "trainer_state.json").read_text())["log_history"][0]
    assert result.steps == 1 and read_run_record(tmp_path / "run").base_model_revision == commit

    # the same conversations, all in step 1 on both sides: one packed row each
    trained, per_row = trl_trained_tokens(config)
    assert per_row == [len(ids)] and theirs["num_tokens"] == ours.tokens == sum(len(i) for i in ids)
    assert {tokenizer.decode(i[-2:]) for i in ids} == {"<turn|>\n"}  # every conversation ends: marker, newline
    newline = ids[0][-1]
    assert trained == ours.trained_tokens + len(ids)  # TRL trains the newline after each <turn|>

    # TRL's loss = crosstune's over its tokens, plus the base model's cross-entropy on the newlines, over both counts
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    with torch.no_grad():
        newline_ce = sum(
            float(torch.nn.functional.cross_entropy(model(torch.tensor([i])).logits[0, -2:-1], torch.tensor([newline])))
            for i in ids
        )
    expected = (ours.loss * ours.trained_tokens + newline_ce) / trained
    tolerance = math.sqrt(1024 * ours.tokens) * UNIT_ROUNDOFF * expected
    assert abs(theirs["loss"] - expected) <= tolerance, (theirs["loss"], expected, tolerance)
    assert abs(theirs["loss"] - ours.loss) > tolerance  # the newlines' share is visible: not a vacuous check

    # the same LoRA: every module, rank and shape (PEFT's names on both sides)
    ours_lora, theirs_lora = adapter_shapes(tmp_path / "run" / ADAPTER), adapter_shapes(tmp_path / "port-trl")
    assert ours_lora == theirs_lora and len(ours_lora) == 2 * read_run_record(tmp_path / "run").lora.layout.modules
    trl_config = json.loads((tmp_path / "port-trl" / "adapter_config.json").read_text())
    assert (trl_config["r"], trl_config["lora_alpha"]) == (8, 16)


def test_an_unpacked_recipe_s_export_trains_under_trl_s_cli(
    hub_cache, tiny_gemma4_dir, synth_corpus_dir, tmp_path, monkeypatch
):
    """TRL's default `packing: false`, as the TRL-format Gemma configs people share keep it: the export must not ask
    for padding-free rows without packing (TRL 1.16 refuses that pair at start, with max_length set). TRL keeps one
    conversation per row, each whole (shorter than max_length), and trains its step."""
    from transformers import AutoTokenizer

    commit = put_in_hub_cache(hub_cache, MODEL, tiny_gemma4_dir)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    base = hub_cache / f"models--{MODEL.replace('/', '--')}" / "snapshots" / commit
    ids = conversations(synth_corpus_dir, AutoTokenizer.from_pretrained(base), tmp_path / "data.jsonl")
    (tmp_path / "recipe.yaml").write_text(RECIPE.replace("packing: true", "packing: false"))
    config = tmp_path / "trl.yaml"
    config.write_text(export_recipe(tmp_path / "recipe.yaml", "trl")[0])
    written = yaml.safe_load(config.read_text())
    assert (written["packing"], written.get("padding_free", False), written["max_length"]) == (False, False, ROW)

    run = subprocess.run(
        [str(Path(sys.executable).parent / "trl"), "sft", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    state = json.loads((tmp_path / "port-trl" / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1 and math.isfinite(state["log_history"][0]["loss"])
    assert sorted(len(r["input_ids"]) for r in trl_rows(config)) == sorted(len(i) for i in ids)  # one per row
