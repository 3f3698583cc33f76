"""Files parsed within bounds: crosstune.untrusted_files refuses an alias bomb, a recursive alias,
nesting 10,000 deep, a number of 5,000 digits and a duplicate JSON key, each as one line `FILE:LINE: what is wrong`
and exit 1 through the commands that read them; with --lenient a data line it refuses is skipped and counted."""

from __future__ import annotations

import json
import resource
import time

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from crosstune.untrusted_files import MAX_DEPTH, MAX_DIGITS, MAX_NODES, parse_json, parse_yaml
from tests.helpers.data import TINY, write_jsonl, write_recipe
from tests.helpers.paths import FIXTURES, RECIPES

_register()
runner = CliRunner()
GOOD = {"prompt": "Write a buffer.", "response": "assign y = a;"}
HUGE = "9" * 5000
BOMB = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(9)
)  # 9^10 strings once every alias is expanded, in 500 bytes


def one_line(args: list, code: int = 1) -> str:
    """The command's output, asserted to be one line ending with exit `code` and no traceback."""
    result = runner.invoke(app, [str(a) for a in args], terminal_width=10_000)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_a_billion_laughs_recipe_is_refused_at_once_in_little_memory(tmp_path):
    """recipe/load.py walked every alias of the composed tree: >5 GB and a minute for this 500-byte file."""
    recipe = tmp_path / "bomb.yaml"
    recipe.write_text(BOMB)
    assert len(BOMB) < 600
    before, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.process_time()
    said = one_line(["recipe", "show", recipe])
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024  # ru_maxrss is KiB on Linux
    assert said.startswith(f"error: {recipe}:1: ")
    assert f"error at <root>: aliases expand to more than {MAX_NODES:,} values" in said
    assert time.process_time() - start < 5 and grown_mib < 200  # 100,000 nodes visited, not 9^10


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        (
            "name: t\nloop: &a [1, *a]\n",
            2,
            f"nested deeper than {MAX_DEPTH} levels (or an alias inside its own anchor)",
        ),
        ("name: t\ndeep: " + "[" * 10_000 + "]" * 10_000 + "\n", 2, f"nested deeper than {MAX_DEPTH} levels"),
        ("name: t\nsteps: " + HUGE + "\n", 2, f"not valid YAML: a number of 5000 digits (at most {MAX_DIGITS})"),
    ],
    ids=["recursive-alias", "nested-10000", "5000-digits"],
)
def test_a_recipe_out_of_bounds_is_one_line_naming_file_and_line(tmp_path, text, line, what):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    assert one_line(["recipe", "show", recipe]) == f"error: {recipe}:{line}: error at <root>: {what}"


def test_a_5000_digit_set_value_is_one_line():
    """`--set train.max_steps=<5000 digits>` met Python's int-digit limit as a traceback."""
    said = one_line(["recipe", "show", TINY, "--set", f"train.max_steps={HUGE}"])
    assert said == (
        "error: error at train.max_steps: --set 'train.max_steps=<5,000 characters>': not valid YAML: a number of "
        f"5000 digits (at most {MAX_DIGITS})  (hint: quote the value for the shell and close every bracket, e.g. --set "
        "'lora.targets=[q, v]')"
    )


def test_a_5000_digit_price_is_one_line(tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text(f"chips:\n  h100:\n    on_demand: {HUGE}\n")
    said = one_line(
        ["cost", "what-if", "--target", "2xh100", "--tokens", "9.2e6", "--tokens-per-s", "100", "--prices", prices]
    )
    assert said == f"error: {prices}:3: not valid YAML: a number of 5000 digits (at most {MAX_DIGITS})"


BAD_JSONL = [  # (line, the ledger's kind, what is wrong)
    ('{"prompt": "p", "response": ' + HUGE + "}", "too_many_digits", f"a number of 5000 digits (at most {MAX_DIGITS})"),
    ('{"prompt": "p", "response": "a", "prompt": "q"}', "duplicate_key", "duplicate key 'prompt': keep one of them"),
    ('{"prompt": "p", "response": ' + "[" * 10_000 + "]" * 10_000 + "}", "too_deep", "nested deeper than 100 levels"),
]
LENIENT_HINT = " (fix the record, or pass --lenient to skip bad records and count them)"


@pytest.mark.parametrize(("line", "kind", "what"), BAD_JSONL, ids=[kind for _, kind, _ in BAD_JSONL])
def test_a_data_line_out_of_bounds_stops_prepare_with_file_and_line(tmp_path, tiny_gemma3_dir, line, kind, what):
    src = write_jsonl(tmp_path / "d.jsonl", [GOOD, line])
    recipe = write_recipe(tmp_path, tiny_gemma3_dir, "gemma3", [{"path": str(src)}], max_seq_len=128)
    assert one_line(["data", "prepare", recipe]) == f"error: {src}:2: {what}{LENIENT_HINT}"


def test_lenient_skips_and_counts_each_line_out_of_bounds(tmp_path, tiny_gemma3_dir):
    src = write_jsonl(tmp_path / "d.jsonl", [GOOD, *(line for line, _, _ in BAD_JSONL), GOOD])
    recipe = write_recipe(tmp_path, tiny_gemma3_dir, "gemma3", [{"path": str(src)}], max_seq_len=128)
    result = runner.invoke(app, ["data", "prepare", str(recipe), "--lenient"], terminal_width=10_000)
    assert result.exit_code == 0, result.output
    stats = json.loads((tmp_path / "runs" / "data" / "t" / "stats.json").read_text())["splits"]["train"]
    assert stats["records_in"] == 5 and stats["records_out"] == 2
    assert stats["skipped"] == {"too_many_digits": 1, "duplicate_key": 1, "too_deep": 1}
    assert stats["skipped_examples"] == [
        f"{src}:{n}: {what}{LENIENT_HINT}" for n, (_, _, what) in enumerate(BAD_JSONL, 2)
    ]


def test_a_samples_file_out_of_bounds_is_one_line(tmp_path):
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"problem": "Prob001_zero", "completion": "x"}\n{"problem": "p", "sample": ' + HUGE + "}\n")
    problems = FIXTURES / "verilogeval"
    args = ["--problems", problems, "--problem", "Prob001_zero", "--samples-file", samples, "--out", tmp_path / "o"]
    said = one_line(["eval", *args])
    assert said == f"error: {samples}:2: a number of 5000 digits (at most {MAX_DIGITS})"


def test_duplicate_keys_in_a_run_json_are_refused_as_yaml_s_are(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{\n  "backend": "torch",\n  "backend": "jax"\n}\n')
    said = one_line(["export", run, "--to", "adapter", "--out", tmp_path / "out"])
    assert said.startswith(f"error: {run / 'run.json'}:3: duplicate key 'backend': keep one of them")


def test_the_owner_locates_every_refusal():
    with pytest.raises(ValueError, match=r"^f.json:3: nested deeper than 100 levels$"):
        parse_json('{\n"a": 1,\n"b": ' + "[" * 101 + "]" * 101 + "}", "f.json")
    assert parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "f.json") is not None  # the limit itself is read
    with pytest.raises(ValueError, match=r"^f.json:2: a number of 101 digits \(at most 100\)$"):
        parse_json("[1,\n1." + "0" * 100 + "]", "f.json")
    with pytest.raises(ValueError, match=r"^f.json:2: not valid JSON: Expecting value \(column 1\)$"):
        parse_json("[1,\n]", "f.json")
    with pytest.raises(ValueError, match=r"^f.yaml:2: invalid UTF-8 at byte 3 of the line$"):
        parse_yaml(b"a: 1\nb: \xff\n", "f.yaml")
    assert parse_json('{"a": [1, 2.5, null]}', "f.json") == {"a": [1, 2.5, None]}


def test_a_named_pipe_is_refused_without_blocking(tmp_path):
    """The reader opened a file before it checked it: a FIFO given as a sweep's summary.json (or any file it reads)
    blocked forever, waiting for a writer. In processes of their own, under a timeout (the old code never returns)."""
    import os
    import subprocess
    import sys

    from tests.helpers.paths import REPO

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    fifo = sweep / "summary.json"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    readers = (
        "import sys\nfrom crosstune import untrusted_files as u\nfor read in (u.read_json, u.read_yaml, u.read_text, "
        "lambda p: list(u.jsonl_rows(p))):\n    try:\n        read(sys.argv[1])\n    except u.UnreadableFile as e:\n"
        "        print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", readers, fifo], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.splitlines() == [f"{fifo}: not a regular file"] * 4, done.stdout + done.stderr
    command = [sys.executable, "-c", "from crosstune.cli import main; main()", "bench", "compare", sweep, sweep]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        f"error: {fifo}: can't read a bench summary: {fifo}: not a regular file"
    ]


def test_a_nul_in_a_recipe_or_a_set_value_is_one_line_naming_its_line(tmp_path):
    """PyYAML's reader refuses a NUL (or another non-printable character) when the loader is built, before any
    parse: that ReaderError was outside the reader's YAMLError handling, a crash line (found by the fuzzer)."""
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(b"name: ok\nlora: {rank: 8}\nmodel: a\x00b\n")
    assert one_line(["recipe", "show", recipe]) == (
        f"error: {recipe}:3: error at <root>: not valid YAML: special characters are not allowed (U+0000)"
    )
    line = one_line(["recipe", "show", RECIPES / "tiny-cpu.yaml", "--set", "name=a\x07b"])
    assert "--set 'name=a\\x07b': not valid YAML: special characters are not allowed (U+0007)" in line
