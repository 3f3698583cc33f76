"""prepare_dataset end to end: sources, bad records (strict and lenient), length policies, staleness, stats, CLI."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.data import DataError, load_prepared, prepare_dataset
from crosstune.data.prepare import data_provenance
from crosstune.data.prepared import restamp_stats
from crosstune.data.stats import summary_line
from tests.helpers.data import recipe_for, write_jsonl, write_recipe

_register()  # every command under the top-level handler, as `crosstune` runs them

HINT = " (fix the record, or pass --lenient to skip bad records and count them)"
GOOD = {"system": "You write Verilog.", "prompt": "Write a buffer.", "response": "<think>easy</think>assign y = a;"}
LONG = {"prompt": "word " * 200, "response": "ok"}
BAD_LINES = [  # (line, kind, exact message after "FILE:2: ")
    ('{"prompt": "p", "response": "a"', "bad_json", "not valid JSON: Expecting ',' delimiter (column 32)" + HINT),
    ("[1, 2]", "bad_json", "expected a JSON object, got list" + HINT),
    ({"system": "s", "prompt": "p"}, "missing_field", "field 'response': missing" + HINT),
    ({"prompt": ["p"], "response": "a"}, "wrong_type", "field 'prompt': expected a string, got list" + HINT),
    ({"prompt": "p", "response": None}, "wrong_type", "field 'response': expected a string, got null" + HINT),
    ({"prompt": "  \n", "response": "a"}, "empty_field", "field 'prompt': empty" + HINT),
    (
        {"prompt": "p", "response": "<think>all thought</think>  "},
        "empty_answer",
        "field 'response': the answer is empty once the reasoning is removed" + HINT,
    ),
    (b'{"prompt": "caf\xe9", "response": "a"}', "invalid_utf8", "invalid UTF-8 at byte 15 of the line" + HINT),
    (
        '{"prompt": "\\ud800", "response": "a"}',
        "invalid_utf8",
        "field 'prompt': not valid UTF-8 (lone surrogate at character 0)" + HINT,
    ),
    (
        {"prompt": "p", "response": "a <end_of_turn> b"},
        "control_token",
        "field 'response': contains the chat control token '<end_of_turn>'" + HINT,
    ),
]


@pytest.fixture(scope="module")
def g3_tok(tiny_gemma3_dir):
    return AutoTokenizer.from_pretrained(tiny_gemma3_dir)


@pytest.mark.parametrize(
    ("line", "kind", "message"), BAD_LINES, ids=[f"{k}{i}" for i, (_, k, _) in enumerate(BAD_LINES)]
)
def test_strict_stops_at_the_bad_record_with_file_line_field_reason(
    tmp_path, tiny_gemma3_dir, g3_tok, line, kind, message
):
    src = write_jsonl(tmp_path / "bad.jsonl", [GOOD, line])
    recipe = recipe_for(tmp_path, tiny_gemma3_dir, "gemma3", [{"path": str(src)}], max_seq_len=256)
    with pytest.raises(DataError) as err:
        prepare_dataset(recipe, tokenizer=g3_tok)
    assert str(err.value) == f"{src}:2: {message}"
    assert not (tmp_path / "runs").exists()  # nothing written, not even a partial folder


def test_strict_drop_counts_the_over_long_record_and_names_its_token_count(tmp_path, tiny_gemma3_dir, g3_tok):
    """Over-long is the length policy, not a broken record: strict mode drops it under `drop` and counts it."""
    src = write_jsonl(tmp_path / "long.jsonl", [GOOD, LONG])
    recipe = recipe_for(tmp_path, tiny_gemma3_dir, "gemma3", [{"path": str(src)}], max_seq_len=64)
    assert recipe.data.strict
    text = g3_tok.apply_chat_template(
        [{"role": "user", "content": LONG["prompt"]}, {"role": "assistant", "content": "ok"}], tokenize=False
    )
    n = len(g3_tok(text, add_special_tokens=False)["input_ids"])
    prepared = prepare_dataset(recipe, tokenizer=g3_tok)
    stats = prepared.stats["splits"]["train"]
    assert stats["records_in"] == 2 and stats["records_out"] == 1 and stats["skipped"] == {}
    assert stats["dropped"] == {"too_long": 1} and prepared.manifest["dropped"] == {"train": {"too_long": 1}}
    assert stats["dropped_examples"] == [f"{src}:2: {n} tokens, more than data.max_seq_len 64"]
    assert prepared.split("train").record_sources == [f"{src}:1"]


def test_the_stats_are_read_typed_and_a_wrong_typed_figure_is_refused_naming_the_file(
    tmp_path, tiny_gemma3_dir, g3_tok
):
    src = write_jsonl(tmp_path / "long.jsonl", [GOOD, LONG])
    recipe = recipe_for(tmp_path, tiny_gemma3_dir, "gemma3", [{"path": str(src)}], max_seq_len=64)
    prepared = prepare_dataset(recipe, tokenizer=g3_tok)
    train = prepared.figures.splits["train"]
    assert (train.records_out, train.row_length, train.dropped, train.skipped) == (1, 64, {"too_long": 1}, {})
    assert data_provenance(prepared)["dropped_by_reason"] == {"too_long": 1}
    path = prepared.path / "stats.json"
    stats = json.loads(path.read_text())
    stats["splits"]["train"]["rows"] = "1"
    path.write_text(json.dumps(stats))
    restamp_stats(prepared.path)  # as `data stats` leaves it: the file is the preparation's, its figure is not
    with pytest.raises(DataError, match=rf"^{path}: splits.train.rows: input should be a valid integer \(got '1'\)"):
        data_provenance(prepared)


def test_lenient_skips_and_counts_every_bad_record(tmp_path, tiny_gemma3_dir, g3_tok):
    lines = [GOOD, *(line for line, _, _ in BAD_LINES), "", LONG, {**GOOD, "system": None}]
    src = write_jsonl(tmp_path / "bad.jsonl", lines)
    recipe = recipe_for(tmp_path, tiny_gemma3_dir, "gemma3", [{"path": str(src)}], max_seq_len=64)
    stats = prepare_dataset(recipe, tokenizer=g3_tok, lenient=True).stats["splits"]["train"]
    assert stats["records_out"] == 2
    assert stats["skipped"] == {
        "bad_json": 2,
        "control_token": 1,
        "empty_answer": 1,
        "empty_field": 1,
        "invalid_utf8": 2,
        "missing_field": 1,
        "wrong_type": 2,
    }
    assert stats["dropped"] == {"too_long": 1}  # not a bad record: the length policy's
    assert stats["blank_lines"] == 1 and stats["records_in"] == 13
    # Listed in file order as read: line errors while reading, then record errors, then length errors.
    assert stats["skipped_examples"][0] == f"{src}:2: {BAD_LINES[0][2]}"
    assert stats["skipped_examples"][1] == f"{src}:3: {BAD_LINES[1][2]}"
    assert len(stats["skipped_examples"]) == 10  # the first few, not all 11


def test_truncate_keeps_the_prompt_and_cuts_the_answer(tmp_path, tiny_gemma3_dir, g3_tok):
    record = {"prompt": "short question", "response": "answer " * 50}
    too_long_prompt = {"prompt": "question " * 60, "response": "a"}
    src = write_jsonl(tmp_path / "t.jsonl", [record, too_long_prompt])
    recipe = recipe_for(
        tmp_path, tiny_gemma3_dir, "gemma3", [{"path": str(src)}], max_seq_len=32, truncation="truncate", packing=False
    )
    prepared = prepare_dataset(recipe, tokenizer=g3_tok, lenient=True)
    stats, split = prepared.stats["splits"]["train"], prepared.split("train")
    assert stats["truncated"] == 1 and stats["skipped"] == {} and stats["dropped"] == {"prompt_too_long": 1}
    assert (
        summary_line(prepared.stats) == "train: kept 1 of 2 records; dropped 1 prompt alone longer than max_seq_len 32"
    )
    assert stats["truncated_tokens_cut"] == int(split.raw_lengths[0]) - 32
    row = split[0]
    assert split.docs["doc_truncated"].tolist() == [1] and np.count_nonzero(row["segment_ids"]) == 32
    assert row["input_ids"][-1] != g3_tok.convert_tokens_to_ids("<end_of_turn>")  # no stop token after a cut
    text = g3_tok.decode(row["input_ids"][row["loss_mask"] == 1].tolist())
    assert text.startswith("answer answer") and "question" not in text


def test_sources_jsonl_glob_parquet_and_save_to_disk_give_the_same_rows(tmp_path, tiny_gemma4_dir):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"question": f"q{i}?", "answer": f"a{i}."} for i in range(6)]
    write_jsonl(tmp_path / "j" / "part-0.jsonl", rows[:4])
    write_jsonl(tmp_path / "j" / "part-1.jsonl", rows[4:])
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data.parquet")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "hf"))
    got = {}
    for name, path in [("glob", "j/*.jsonl"), ("parquet", "data.parquet"), ("hf_disk", "hf")]:
        recipe = recipe_for(
            tmp_path / name, tiny_gemma4_dir, "gemma4", [{"path": str(tmp_path / path)}], columns={"preset": "qa"}
        )
        prepared = prepare_dataset(recipe)
        got[name] = prepared.split("train").rows(range(len(prepared.split("train"))))["input_ids"]
        assert prepared.stats["splits"]["train"]["records_out"] == 6
    assert np.array_equal(got["glob"], got["parquet"]) and np.array_equal(got["glob"], got["hf_disk"])


def test_subsample_is_deterministic_and_eval_split_is_kept_whole(tmp_path, tiny_gemma3_dir, g3_tok):
    rows = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(20)]
    train, val = write_jsonl(tmp_path / "train.jsonl", rows), write_jsonl(tmp_path / "eval.jsonl", rows[:5])
    sources = [{"path": str(train)}, {"path": str(val), "split": "eval"}]

    def picked(seed: int, where: str) -> list[str]:
        recipe = recipe_for(
            tmp_path / where,
            tiny_gemma3_dir,
            "gemma3",
            sources,
            columns={"preset": "qa"},
            subsample={"size": 7, "seed": seed},
        )
        prepared = prepare_dataset(recipe, tokenizer=g3_tok)
        assert prepared.stats["splits"]["train"]["subsampled_out"] == 13
        assert prepared.stats["splits"]["eval"]["records_out"] == 5
        return prepared.split("train").record_sources

    first, again, other = picked(1, "a"), picked(1, "b"), picked(2, "c")
    assert first == again and len(first) == 7 and first != other


def test_stale_preparations_are_refused(tmp_path, tiny_gemma3_dir, g3_tok):
    src = write_jsonl(tmp_path / "d.jsonl", [GOOD] * 3)
    recipe = recipe_for(tmp_path, tiny_gemma3_dir, "gemma3", [{"path": str(src)}], max_seq_len=128)
    prepared = prepare_dataset(recipe, tokenizer=g3_tok)
    assert load_prepared(recipe, tokenizer=g3_tok).manifest == prepared.manifest
    assert load_prepared(recipe).manifest == prepared.manifest  # the tokenizer read back from disk hashes the same
    assert prepare_dataset(recipe, tokenizer=g3_tok).reused

    shorter = recipe_for(
        tmp_path, tiny_gemma3_dir, "gemma3", [{"path": str(src)}], ["data.max_seq_len=64"], max_seq_len=128
    )
    with pytest.raises(DataError, match="stale: data.max_seq_len: 128 → 64"):
        load_prepared(shorter, tokenizer=g3_tok)
    with pytest.raises(DataError, match="a different preparation is already there: data.max_seq_len: 128 → 64"):
        prepare_dataset(shorter, tokenizer=g3_tok)

    other_model = tmp_path / "model-copy"
    shutil.copytree(tiny_gemma3_dir, other_model)
    config = json.loads((other_model / "tokenizer_config.json").read_text())
    config["chat_template"] += "{#- a harmless edit still changes the template -#}"
    (other_model / "tokenizer_config.json").write_text(json.dumps(config))
    moved = recipe_for(tmp_path, other_model, "gemma3", [{"path": str(src)}], max_seq_len=128)
    with pytest.raises(DataError, match="stale: the tokenizer or its chat template changed"):
        load_prepared(moved)

    write_jsonl(src, [GOOD] * 4)
    with pytest.raises(DataError, match="stale: the source files changed"):
        load_prepared(recipe, tokenizer=g3_tok)
    assert not prepare_dataset(recipe, tokenizer=g3_tok, force=True).reused
    load_prepared(recipe, tokenizer=g3_tok)


def test_stats_figures_on_the_synthetic_corpus(tmp_path, tiny_gemma4_dir, synth_corpus_dir):
    sources = [{"path": str(synth_corpus_dir / "train.jsonl")}]
    recipe = recipe_for(
        tmp_path,
        tiny_gemma4_dir,
        "gemma4",
        sources,
        max_seq_len=1024,
        reasoning="native",
        subsample={"size": 60, "seed": 0},
    )
    prepared = prepare_dataset(recipe, lenient=True)
    s, split = prepared.stats["splits"]["train"], prepared.split("train")
    rows = split.rows(range(len(split)))
    left_out = sum(s["skipped"].values()) + sum(s["dropped"].values()) + s["subsampled_out"]
    assert s["records_in"] == s["records_out"] + left_out == 200
    assert s["tokens"] == int(np.count_nonzero(rows["segment_ids"])) and s["target_tokens"] == int(
        rows["loss_mask"].sum()
    )
    assert s["trained_fraction"] == round(s["target_tokens"] / s["tokens"], 4)
    assert s["packing_efficiency"] == round(s["tokens"] / (len(split) * 1024), 4) > s["padding_efficiency"]
    assert sum(s["histogram"]["counts"]) == len(split.raw_lengths) == 60
    assert s["lengths"]["max"] == int(split.raw_lengths.max())
    assert s["lengths"]["fraction_within_max_seq_len"] == round(float((split.raw_lengths <= 1024).mean()), 4)
    assert (prepared.path / "lengths.png").stat().st_size > 1000


def test_cli_prepare_error_has_no_traceback_and_stats_saves(tmp_path, tiny_gemma3_dir):
    src = write_jsonl(tmp_path / "d.jsonl", [GOOD, {"prompt": "p"}])
    recipe = write_recipe(tmp_path, tiny_gemma3_dir, "gemma3", [{"path": str(src)}], max_seq_len=128)
    runner = CliRunner()
    bad = runner.invoke(app, ["data", "prepare", str(recipe)])
    assert bad.exit_code == 1 and "Traceback" not in bad.output
    assert f"{src}:2: field 'response': missing" in " ".join(bad.output.split())
    ok = runner.invoke(app, ["data", "prepare", str(recipe), "--lenient"])
    assert ok.exit_code == 0, ok.output
    assert "missing_field" in ok.output and f"{src}:2" in ok.output.replace("\n", "")
    prepared_dir = tmp_path / "runs" / "data" / "t"
    (prepared_dir / "lengths.png").unlink()
    shown = runner.invoke(app, ["data", "stats", str(prepared_dir)])
    assert shown.exit_code == 0 and "records in" in shown.output
    assert (prepared_dir / "lengths.png").is_file()
    stale = runner.invoke(app, ["data", "stats", str(recipe), "--set", "data.max_seq_len=64"])
    assert stale.exit_code == 0 and "stale" in stale.output
