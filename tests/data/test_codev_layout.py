"""Records in CodeV-R1's SFT layout (tests/fixtures/codev_r1/sft.jsonl: system / prompt / response, responses
`<think>…</think>` then `<answer>```verilog …```</answer>`, a system prompt asking for those tags; our own text):
the shipped 31B recipes keep what fits and drop (and count) what doesn't, and a system prompt the targets would
disobey is reported."""

from __future__ import annotations

import json
import re

import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.data import prepare_dataset
from crosstune.recipe import RecipeError, load_recipe
from tests.helpers.data import recipe_for
from tests.helpers.paths import FIXTURES, RECIPES

_register()  # every command under the top-level handler, as `crosstune` runs them

CODEV = FIXTURES / "codev_r1" / "sft.jsonl"
RECORDS = [json.loads(line) for line in CODEV.read_text().splitlines()]
SHIPPED = ["gemma4-31b-tpu-v5p-8", "gemma4-31b-2xh100", "gemma3-27b-tpu-v6e-8"]
ANSWER = re.compile(r"<answer>(.*)</answer>", re.S)


def expected_target(record: dict, markup: str) -> str:
    """The trained assistant text under reasoning strip, written out independently of crosstune.data."""
    answer = ANSWER.search(record["response"]).group(1).strip()
    return f"<think>\n</think>\n<answer>\n{answer}\n</answer>" if markup == "tags" else answer


def token_length(tokenizer, record: dict, target: str) -> int:
    messages = [
        {"role": "system", "content": record["system"]},
        {"role": "user", "content": record["prompt"]},
        {"role": "assistant", "content": target},
    ]
    return len(tokenizer(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False).input_ids)


def overrides(model_dir, tmp_path) -> list[str]:
    """A shipped recipe as it is, its data section untouched but for where the records are; model and hardware
    swapped for the tiny model on this CPU."""
    return [
        f"model.path={model_dir}",
        "hardware=cpu",
        "backend.jax.mesh={fsdp: 1, tp: 1}",
        "backend.torch={devices: 1, nodes: 1, fsdp: false}",
        "serve.tensor_parallel_size=1",
        f"data.sources=[{{path: {CODEV}}}]",
        f"data.prepared_dir={tmp_path / 'prepared'}",
    ]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_31b_recipes_keep_every_record_that_fits_and_drop_and_count_the_rest(
    name, tmp_path, tiny_gemma3_dir, tiny_gemma4_dir
):
    model_dir = tiny_gemma3_dir if name.startswith("gemma3") else tiny_gemma4_dir
    recipe = load_recipe(RECIPES / f"{name}.yaml", overrides(model_dir, tmp_path))
    data = recipe.data
    assert data.strict and data.truncation == "drop" and data.max_seq_len == 3072  # the shipped settings
    assert data.reasoning == "strip" and data.answer_markup == "tags" and data.system_prompt.policy == "keep"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    lengths = [token_length(tokenizer, r, expected_target(r, data.answer_markup)) for r in RECORDS]
    fits = [f"{CODEV}:{i}" for i, n in enumerate(lengths, 1) if n <= data.max_seq_len]
    too_long = len(RECORDS) - len(fits)
    assert 0 < too_long < len(RECORDS) and all(abs(n - data.max_seq_len) > 200 for n in lengths)  # clear margins

    sets = [a for o in overrides(model_dir, tmp_path) for a in ("--set", o)]
    result = CliRunner().invoke(app, ["data", "prepare", str(RECIPES / f"{name}.yaml"), *sets])
    assert result.exit_code == 0, result.output
    prepared = prepare_dataset(recipe)  # the CLI's preparation, reused
    assert prepared.reused
    split = prepared.split("train")
    assert sorted(split.record_sources, key=_line) == fits  # every record that fits, and only those
    assert sorted(split.raw_lengths.tolist()) == sorted(lengths)  # the lengths it judged are the real ones
    stats = prepared.stats["splits"]["train"]
    assert stats["dropped"] == {"too_long": too_long} and stats["skipped"] == {}
    assert prepared.manifest["dropped"] == {"train": {"too_long": too_long}}
    assert stats["records_in"] == len(RECORDS) and stats["records_out"] == len(fits)
    summary = f"train: kept {len(fits)} of {len(RECORDS)} records; dropped {too_long} longer than max_seq_len 3072"
    assert summary in " ".join(result.output.split())
    assert prepared.stats["warnings"] == [] and "warning" not in result.output


def _line(where: str) -> int:
    return int(where.rsplit(":", 1)[1])


def _targets(prepared, tokenizer) -> list[str]:
    """The trained text of every kept record, decoded from the loss mask (one document per row: packing off)."""
    split = prepared.split("train")
    rows = split.rows(range(len(split)))
    pairs = rows["input_ids"], rows["loss_mask"]
    return [tokenizer.decode(ids[mask == 1].tolist()) for ids, mask in zip(*pairs, strict=True)]


def test_a_kept_tag_prompt_with_stripped_targets_warns_naming_both(tmp_path, tiny_gemma4_dir):
    recipe = recipe_for(tmp_path, tiny_gemma4_dir, "gemma4", [{"path": str(CODEV)}], max_seq_len=3072, packing=False)
    prepared = prepare_dataset(recipe)
    assert prepared.stats["warnings"] == [
        f"train: in {len(RECORDS)} of {len(RECORDS)} records (first: {CODEV}:1) the system prompt "
        "(data.system_prompt.policy keep) asks for <think>…</think> and <answer>…</answer> tags, but "
        "data.reasoning strip (answer_markup plain) trains targets without them: a model trained so learns to "
        "disobey its system prompt. Keep them consistent: data.answer_markup tags (reasoning stripped, tags "
        "kept), data.system_prompt.policy strip or replace, or data.reasoning keep_inline"
    ]
    tokenizer = AutoTokenizer.from_pretrained(tiny_gemma4_dir)
    first = _targets(prepared, tokenizer)[0]
    assert first.startswith("```verilog\nmodule mux2(") and "<" + "answer>" not in first


def test_answer_markup_tags_keeps_the_tags_the_prompt_asks_for_without_the_reasoning(tmp_path, tiny_gemma4_dir):
    recipe = recipe_for(
        tmp_path,
        tiny_gemma4_dir,
        "gemma4",
        [{"path": str(CODEV)}],
        max_seq_len=3072,
        packing=False,
        answer_markup="tags",
    )
    prepared = prepare_dataset(recipe)
    assert prepared.stats["warnings"] == []
    tokenizer = AutoTokenizer.from_pretrained(tiny_gemma4_dir)
    lines = map(_line, prepared.split("train").record_sources)
    by_line = dict(zip(lines, _targets(prepared, tokenizer), strict=True))
    assert by_line[1] == expected_target(RECORDS[0], "tags") + "<turn|>"  # exactly, through the end of turn
    assert by_line[2].startswith("<think>\n</think>\n<answer>\n```verilog\nmodule bcd_counter(")
    assert "Step 1:" not in by_line[2] and len(by_line[2]) < 600  # the 60-step reasoning is gone


@pytest.mark.parametrize(
    ("settings", "dropped"),
    [
        ({"reasoning": "keep_inline"}, 4),  # the tags stay as written; the long reasoning no longer fits
        ({"system_prompt": {"policy": "strip"}}, 2),
        ({"system_prompt": {"policy": "replace", "text": "You write Verilog modules."}}, 2),
    ],
)
def test_other_consistent_settings_give_no_warning(tmp_path, tiny_gemma4_dir, settings, dropped):
    recipe = recipe_for(tmp_path, tiny_gemma4_dir, "gemma4", [{"path": str(CODEV)}], max_seq_len=3072, **settings)
    prepared = prepare_dataset(recipe)
    assert prepared.stats["warnings"] == []
    assert prepared.stats["splits"]["train"]["dropped"] == {"too_long": dropped}


def test_a_replacement_prompt_asking_for_tags_is_a_recipe_warning(tmp_path, tiny_gemma4_dir):
    policy = {"policy": "replace", "text": "Think inside <think> </think>, then answer inside <answer> </answer>."}
    recipe = recipe_for(tmp_path, tiny_gemma4_dir, "gemma4", [{"path": str(CODEV)}], system_prompt=policy)
    problems = [p for p in recipe.warnings if p.path == "data.system_prompt.text"]
    assert len(problems) == 1 and problems[0].severity == "warning"
    assert problems[0].message == (
        "asks for <think> and <answer> tags, but data.reasoning strip with answer_markup plain trains targets without "
        "them: the model learns to disobey its system prompt"
    )
    fixed = recipe_for(
        tmp_path / "tags",
        tiny_gemma4_dir,
        "gemma4",
        [{"path": str(CODEV)}],
        system_prompt=policy,
        answer_markup="tags",
    )
    assert not [p for p in fixed.warnings if p.path == "data.system_prompt.text"]


def test_answer_markup_tags_needs_reasoning_strip(tmp_path, tiny_gemma4_dir):
    with pytest.raises(RecipeError, match="answer_markup 'tags' rewrites stripped targets; reasoning 'keep_inline'"):
        recipe_for(
            tmp_path, tiny_gemma4_dir, "gemma4", [{"path": str(CODEV)}], reasoning="keep_inline", answer_markup="tags"
        )
