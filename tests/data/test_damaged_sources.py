"""Damaged data sources end in one DataError naming the file, never a traceback from inside `datasets` or pyarrow:
a save_to_disk folder with a truncated or missing .arrow, a broken dataset_info.json, a wrong-typed state.json; and a
named pipe (or any file that is not regular) is refused before it is opened, so nothing blocks on it."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time

import pytest

from crosstune.data import DataError
from crosstune.data.bad_input import Ledger
from crosstune.data.sources import read_split
from tests.helpers.data import recipe_for, write_jsonl

ARROW = "data-00000-of-00001.arrow"
HINT = " (save it again with datasets' save_to_disk, or point data.sources at the original files)"
ROWS = [{"question": f"q{i}?", "answer": f"a{i}."} for i in range(4)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A Dataset and a DatasetDict, as datasets.save_to_disk writes them."""
    import datasets

    root = tmp_path_factory.mktemp("saved")
    ds = datasets.Dataset.from_list(ROWS)
    ds.save_to_disk(str(root / "ds"))
    datasets.DatasetDict({"train": ds}).save_to_disk(str(root / "dd"))
    return root


def _rewrite(path, text: str) -> None:
    path.write_text(text)


def _truncate(path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _state(**changes):
    def change(path) -> None:
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))

    return change


DAMAGE = [  # (folder, file, how it is damaged, the message after "FILE: " or "FILE:LINE: ")
    ("ds", ARROW, _truncate, "not a readable Arrow file ("),
    ("ds", ARROW, os.remove, f"listed in state.json but missing (or not a regular file){HINT}"),
    ("ds", "dataset_info.json", lambda p: _rewrite(p, "{broken"), "not valid JSON: Expecting property name"),
    ("ds", "dataset_info.json", lambda p: _rewrite(p, '{"features": "x"}'), "`features` must be an object, not str"),
    ("ds", "dataset_info.json", lambda p: _rewrite(p, "[]"), "must be a JSON object, not list"),
    ("ds", "dataset_info.json", os.remove, f"missing (or not a regular file){HINT}"),
    ("ds", "state.json", lambda p: _rewrite(p, "[1]"), "must be a JSON object, not list"),
    ("ds", "state.json", _state(_data_files=ARROW), "`_data_files` must be a list, not str"),
    ("ds", "state.json", _state(_data_files=[ARROW]), "`_data_files[0]` must be {filename: a file in the folder}"),
    ("ds", "state.json", _state(_data_files=[{"filename": "../x.arrow"}]), "`_data_files[0]` must be {filename:"),
    ("ds", "state.json", _state(_format_kwargs=[]), "`_format_kwargs` must be an object, not list"),
    ("ds", "state.json", _state(_output_all_columns="no"), "`_output_all_columns` must be a boolean, not str"),
    ("ds", "state.json", _state(_split=3), "`_split` must be a string or null, not int"),
    ("dd", "dataset_dict.json", lambda p: _rewrite(p, '{"splits": "train"}'), "`splits` must be a list of split"),
    ("dd", "dataset_dict.json", lambda p: _rewrite(p, "{"), "not valid JSON: Expecting property name"),
    ("dd", f"train/{ARROW}", _truncate, "not a readable Arrow file ("),
]


@pytest.mark.parametrize(
    ("folder", "name", "damage", "message"), DAMAGE, ids=[f"{f}/{n}-{i}" for i, (f, n, _, _) in enumerate(DAMAGE)]
)
def test_a_damaged_save_to_disk_folder_is_one_error_naming_the_file(
    tmp_path, saved, tiny_gemma4_dir, folder, name, damage, message
):
    source = tmp_path / "hf"
    shutil.copytree(saved / folder, source)
    recipe = recipe_for(tmp_path / "r", tiny_gemma4_dir, "gemma4", [{"path": str(source)}], columns={"preset": "qa"})
    records, _ = read_split(recipe, "train", Ledger(strict=True))  # the control: the undamaged copy reads
    assert [r.row for r in records] == ROWS
    damage(source / name)
    with pytest.raises(DataError) as refused:
        read_split(recipe, "train", Ledger(strict=True))
    said = str(refused.value)
    assert re.match(rf"{re.escape(str(source / name))}(:1)?: {re.escape(message)}", said), said
    assert "\n" not in said


def test_a_named_pipe_as_a_source_is_refused_without_being_opened(tmp_path, tiny_gemma4_dir):
    pipe = tmp_path / "train.jsonl"
    os.mkfifo(pipe)
    folder = tmp_path / "parts"
    write_jsonl(folder / "a.jsonl", ROWS)
    os.mkfifo(folder / "b.jsonl")
    for path in (pipe, folder / "*.jsonl"):  # the pipe named, or matched by a glob
        recipe = recipe_for(tmp_path / "r", tiny_gemma4_dir, "gemma4", [{"path": str(path)}], columns={"preset": "qa"})
        outcome: list = []
        reader = threading.Thread(target=lambda r=recipe, o=outcome: o.append(_refusal(r)), daemon=True)
        reader.start()
        reader.join(timeout=30)
        if reader.is_alive():  # it opened the pipe and waits for a writer: unblock it, then fail
            with open(pipe if path == pipe else folder / "b.jsonl", "w"):
                time.sleep(0.1)
            pytest.fail(f"reading {path} blocked on a named pipe")
        named = pipe if path == pipe else folder / "b.jsonl"
        assert outcome == [
            f"data.sources[0].path: {named} is not a regular file (a pipe, socket or device): it is "
            "never read (give a JSONL/Parquet file or a save_to_disk folder)"
        ]


def _refusal(recipe) -> str | None:
    try:
        read_split(recipe, "train", Ledger(strict=True))
    except DataError as e:
        return str(e)
    return None
