"""`--out PATH/sub` where PATH is a file is one line for every command that writes a folder or a file (ownership.
check_out owns the rule), before any work and with the file left as it was; a malformed `--corpus` file is named as
such (it was reported as "Invalid value for --shards")."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from tests.helpers.paths import FIXTURES, RECIPES, REPO

_register()
COMMANDS = {
    "eval": ["eval", "--problems", str(FIXTURES / "verilogeval"), "--references-only", "--problem", "Prob002_and2"],
    "study": ["study", str(RECIPES / "tiny-cpu.yaml"), "--only", "plan"],
    "model tiny": ["model", "tiny", "--family", "gemma4"],
    "launch": ["launch", "recipes/gemma4-31b-2xh100.yaml", "--on", "slurm"],
    "recipe import": ["recipe", "import", str(FIXTURES / "ports" / "trl" / "gemma4-31b-lora.yaml")],
    "recipe export": ["recipe", "export", str(RECIPES / "tiny-cpu.yaml"), "--to", "trl"],
}


def one_line_failure(args: list[str]) -> str:
    result = CliRunner(env={"COLUMNS": "400"}).invoke(app, args, terminal_width=400)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "\n" not in result.output.strip(), result.output
    return result.output.strip()


@pytest.mark.parametrize("command", list(COMMANDS))
def test_out_inside_a_file_is_one_line_before_any_work(tmp_path, monkeypatch, command):
    monkeypatch.chdir(REPO)  # launch names the recipe relative to the checkout
    mine = tmp_path / "notes.txt"
    mine.write_text("mine\n")
    said = one_line_failure([*COMMANDS[command], "--out", str(mine / "sub")])
    assert said.startswith(f"error: --out {mine / 'sub'} is inside {mine}, which is a file: give a "), said
    assert mine.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'{"prompt": "p"\n', "train.jsonl:1: not valid JSON: Expecting ',' delimiter"),
        (b'{"prompt": "p"}\n[1, 2]\n', "train.jsonl:2: expected a JSON object, got list"),
        (b'{"prompt": "caf\xe9"}\n', "train.jsonl:1: invalid UTF-8 at byte 15 of the line"),
        (b'{"n": 1}\n', "train.jsonl: no system/prompt/response text to train a tokenizer on"),
    ],
)
def test_a_malformed_corpus_is_named_as_the_corpus(tmp_path, text, message):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.jsonl").write_bytes(text)
    out = tmp_path / "model"
    said = one_line_failure(["model", "tiny", "--family", "gemma4", "--corpus", str(corpus), "--out", str(out)])
    assert said.startswith(f"error: --corpus {corpus}: {corpus / message}"), said
    assert "--shards" not in said and not out.exists()
