"""Case generators of the foreign formats: Axolotl, TRL and LLaMA-Factory configs through
`recipe import` (a black box; a LLaMA-Factory config beside the dataset_info.json its `dataset:` resolves through), a
recipe through `recipe export` to each of the three, a hub cache laid out by huggingface_hub with hostile refs and
links, a model folder's config.json and an adapter's adapter_config.json with hostile values (newlines, huge and
negative numbers, wrong types, pathological regexes, paths), each read by the commands that read them."""

from __future__ import annotations

import hashlib
import json
import os
import random

import yaml

from tests.fuzz import hostile
from tests.fuzz.case import Case, Ctx
from tests.fuzz.world import recipe

# values a foreign config holds where a number, a name or a pattern belongs
FOREIGN = [
    *hostile.VALUES,
    "a\noutput_dir: /tmp/elsewhere",
    "x\u2028push_to_hub: true",
    "(.*.*)*q_projX",
    "(.*?,){11}P",
    "(",
    "/",
    "../../..",
    "~",
    "hf://acme/x",
    "acme/" + "x" * 120,
    "acme/gemmä",
    "refs/../../x",
    "$(touch PWNED)",
]
DATASET_INFO_KEYS = ["file_name", "hf_hub_url", "formatting", "columns", "tags", "subset", "split", "num_samples"]
HOSTILE_KEYS = ["my_key\noutput_dir: /tmp/elsewhere", "a: b", "#", "- x", "\u2028", "x" * 500]
TOOLS = {
    "axolotl": {
        "base_model": "google/gemma-4-31B-it",
        "adapter": "lora",
        "lora_r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "sequence_len": 2048,
        "micro_batch_size": 1,
        "gradient_accumulation_steps": 4,
        "learning_rate": 0.0002,
        "num_epochs": 1,
        "datasets": [{"path": "data/train.jsonl", "type": "chat_template"}],
        "output_dir": "out",
    },
    "trl": {
        "model_name_or_path": "google/gemma-4-31B-it",
        "dataset_name": "data/train.jsonl",
        "use_peft": True,
        "lora_r": 16,
        "lora_alpha": 32,
        "lora_target_modules": "model\\.language_model\\.layers\\.\\d+\\.self_attn\\.(q|v)_proj",
        "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": 4,
        "learning_rate": 0.0002,
        "max_length": 2048,
        "num_train_epochs": 1,
        "output_dir": "out",
    },
    "llamafactory": {  # LLaMA-Factory's documented LoRA keys (its dataset named in data/dataset_info.json)
        "model_name_or_path": "google/gemma-3-4b-it",
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "lora",
        "lora_rank": 8,
        "lora_target": "all",
        "dataset": "alpaca_en_demo",
        "template": "gemma3",
        "cutoff_len": 2048,
        "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": 8,
        "learning_rate": 0.0001,
        "num_train_epochs": 3.0,
        "output_dir": "saves/gemma3-4b/lora/sft",
    },
}


def _foreign_value(rng: random.Random):
    return rng.choice(FOREIGN)


def _change(ctx: Ctx, doc: dict, keys: list[str]) -> None:
    """One hostile change to a foreign mapping: a value at a key crosstune reads, a key of its own, a nested value."""
    how = ctx.rng.choice(["value", "value", "key", "nested"])
    if how == "key":
        key = ctx.rng.choice(HOSTILE_KEYS)
        doc[key] = _foreign_value(ctx.rng)
        ctx.note(f"key {key[:40]!r}")
    elif how == "nested" and any(isinstance(v, dict | list) for v in doc.values()):
        key = ctx.rng.choice([k for k, v in doc.items() if isinstance(v, dict | list)])
        doc[key] = {"a": {"b": _foreign_value(ctx.rng)}} if ctx.chance(0.5) else [_foreign_value(ctx.rng)] * 3
        ctx.note(f"{key}: nested")
    else:
        key = ctx.rng.choice(keys)
        doc[key] = _foreign_value(ctx.rng)
        ctx.note(f"{key}: {str(doc[key])[:40]!r}")


def _dump(ctx: Ctx, doc: dict, rel: str, kind: str) -> None:
    as_yaml = lambda: yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)  # noqa: E731
    text = json.dumps(doc, allow_nan=True) if kind == "json" else as_yaml()
    path = ctx.tree / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace('"@@HUGE@@"', hostile.HUGE).replace("'@@HUGE@@'", hostile.HUGE))


def recipe_import(ctx: Ctx) -> Case:
    tool = ctx.rng.choice(sorted(TOOLS))
    ctx.copy("data")
    doc = json.loads(json.dumps(TOOLS[tool]))
    for _ in range(ctx.rng.randint(1, 3)):
        _change(ctx, doc, list(TOOLS[tool]))
    _dump(ctx, doc, "config.yaml", "yaml")
    ctx.note(f"a {tool} config")
    if tool == "llamafactory":  # the definition its `dataset:` name resolves through, hostile at times
        info = {"file_name": "train.jsonl", "columns": {"prompt": "prompt", "response": "response"}}
        if ctx.chance(0.5):
            _change(ctx, info, DATASET_INFO_KEYS)
        _dump(ctx, {"alpaca_en_demo": info}, "data/dataset_info.json", "json")
    protected: list = []
    mutations = [
        lambda: ctx.content("config.yaml", "yaml"),
        lambda: ctx.entry("data/train.jsonl"),
        lambda: protected.extend(ctx.out_path("recipe.yaml", ("user", "file", "fifo"))),
        lambda: ["--from", ctx.rng.choice(["axolotl", "trl", "llamafactory", "x\ny"])],
        lambda: ["--hardware", ctx.rng.choice(["tpu-v5p-8", "2xh100", "cpu", "$(id)"])],
        lambda: ["--name", hostile.string(ctx.rng)],
    ]
    extra = ctx.mutate(mutations, 0, 2)
    return Case(["recipe", "import", "config.yaml", "--out", "recipe.yaml", *extra], timeout_s=60, protected=protected)


def recipe_export(ctx: Ctx) -> Case:
    name = ctx.rng.choice(["recipe.yaml", "r\npush_to_hub: true\n.yaml", "r'$(touch PWNED)'.yaml", "ré\u2028.yaml"])
    doc = recipe()
    doc["description"] = _foreign_value(ctx.rng) if ctx.chance(0.5) else "x"
    if not isinstance(doc["description"], str):
        doc["description"] = str(doc["description"])
    ctx.write_recipe(doc, name=name)
    ctx.note(f"the recipe is {name!r}")
    protected: list = []
    mutations = [
        lambda: ctx.sets(),
        lambda: protected.extend(ctx.out_path("out.yaml", ("user", "file", "fifo"))),
    ]
    extra = ctx.mutate(mutations, 0, 2)
    to = ctx.rng.choice(["trl", "axolotl", "llamafactory"])
    return Case(["recipe", "export", name, "--to", to, "--out", "out.yaml", *extra], timeout_s=60, protected=protected)


CONFIG_KEYS = (
    "hidden_size vocab_size num_attention_heads num_key_value_heads head_dim intermediate_size num_hidden_layers "
    "layer_types sliding_window rope_parameters model_type text_config num_kv_shared_layers final_logit_softcapping"
).split()


def model_config(ctx: Ctx) -> Case:
    """A model folder whose config.json holds hostile values, read by plan, the drafter builder or serve plan."""
    ctx.copy("model")
    cfg = json.loads((ctx.tree / "model" / "config.json").read_text())
    for _ in range(ctx.rng.randint(1, 3)):
        _change(ctx, cfg, CONFIG_KEYS)
    _dump(ctx, cfg, "model/config.json", "json")
    doc = recipe()
    doc["model"]["path"] = "model"
    name = ctx.write_recipe(doc)
    which = ctx.rng.choice(["plan", "assistant", "draft", "validate"])
    argv = {
        "plan": ["plan", name],
        "assistant": ["model", "tiny", "--family", "gemma4", "--assistant", "model", "--out", "drafter"],
        "draft": ["serve", "plan", name, "--target", "2xh100", "--draft", "model"],
        "validate": ["recipe", "validate", name],
    }[which]
    return Case(argv, timeout_s=120)


ADAPTER_KEYS = (
    "r lora_alpha rank_pattern alpha_pattern target_modules use_rslora peft_type bias base_model_name_or_path"
).split()


def adapter_config(ctx: Ctx) -> Case:
    """A run whose adapter_config.json holds hostile values (a pathological rank_pattern key among them), exported,
    or an adapter folder served."""
    ctx.copy("run")
    path = ctx.tree / "run" / "adapter" / "adapter_config.json"
    cfg = json.loads(path.read_text())
    for _ in range(ctx.rng.randint(1, 2)):
        _change(ctx, cfg, ADAPTER_KEYS)
    if ctx.chance(0.3):
        cfg["rank_pattern"] = {ctx.rng.choice(["(.*?,){11}P", "(", "q_proj" * 300, "(a|ab|b)*$."]): 4}
        ctx.note(f"rank_pattern {cfg['rank_pattern']}")
    _dump(ctx, cfg, "run/adapter/adapter_config.json", "json")
    if ctx.chance(0.3):
        ctx.entry("run/adapter/adapter_model.safetensors", ["link_out_file"])
    if ctx.chance(0.5):
        return Case(["export", "run", "--to", "adapter", "--out", "out"], timeout_s=120)
    name = ctx.write_recipe()
    return Case(["serve", "plan", name, "--target", "2xh100", "--adapter", "run/adapter"], timeout_s=60)


def _hub_repo(ctx: Ctx, repo: str) -> str:
    """The world's model as hub repo `repo` in tree/hub (huggingface_hub's layout: blobs, snapshots/COMMIT of
    links into them, refs/main); its commit."""
    root = ctx.tree / "hub" / f"models--{repo.replace('/', '--')}"
    files = sorted(p for p in (ctx.world / "model").iterdir() if p.is_file() and not p.name.startswith("."))
    commit = hashlib.sha1(repo.encode()).hexdigest()
    for f in files:
        digest = hashlib.sha256(f.name.encode()).hexdigest()
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        (root / "blobs" / digest).write_bytes(f.read_bytes())
        link = root / "snapshots" / commit / f.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(root / "blobs" / digest, link.parent))
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    return commit


def hub_cache(ctx: Ctx) -> Case:
    """A hub cache whose refs, snapshots or links are hostile; the recipe names the model hf://acme/tiny."""
    commit = _hub_repo(ctx, "acme/tiny")
    root = ctx.tree / "hub" / "models--acme--tiny"
    how = ctx.rng.choice(["ref_path", "ref_garbage", "snapshot_link_out", "config_link_out", "revision", "valid"])
    ctx.note(f"hub cache: {how}")
    if how == "ref_path":
        (root / "refs" / "main").write_text(ctx.rng.choice(["../../../../canary", "../../../../canary/folder", "/"]))
    elif how == "ref_garbage":
        (root / "refs" / "main").write_text(ctx.rng.choice(["", "\n", "x" * 5000, "é", commit + "\n../x"]))
    elif how == "snapshot_link_out":
        snap = root / "snapshots" / ("f" * 40)
        snap.symlink_to(ctx.canary / "folder")
        (root / "refs" / "main").write_text("f" * 40)
    elif how == "config_link_out":
        config = root / "snapshots" / commit / "config.json"
        config.unlink()
        config.symlink_to(ctx.canary / "folder" / "summary.json")
    doc = recipe()
    doc["model"]["path"] = ctx.rng.choice(["hf://acme/tiny", "acme/tiny", "hf://acme/tiny/x", "hf://acme/" + "t" * 95])
    if how == "revision":
        doc["model"]["revision"] = _foreign_value(ctx.rng) if ctx.chance(0.7) else "main"
        ctx.note(f"model.revision {str(doc['model']['revision'])[:40]!r}")
    name = ctx.write_recipe(doc)
    argv = ctx.rng.choice([["plan", name], ["recipe", "validate", name], ["serve", "plan", name, "--target", "2xh100"]])
    return Case(argv, timeout_s=60, env={"HF_HUB_CACHE": "@CASE@/tree/hub", "HF_HUB_OFFLINE": "1"})
