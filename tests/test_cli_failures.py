"""Whatever a command raises ends in one line on stderr and exit 1 (crosstune.cli's one handler): an OSError of any
kind as `PATH: what failed (why): what to do`, pathlib's link loop, an undecodable file named; anything else is a
bug, said so in one line with the crash file that holds its traceback (CROSSTUNE_DEBUG=1: the traceback itself).
Exit 2 is left to typer's own usage errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from crosstune.cli import _register, app
from tests.helpers.paths import RECIPES, REPO

_register()


def one_line(args: list, code: int = 1) -> str:
    """The one `error: …` line of a command that fails (in-process): nothing else on stderr, no traceback."""
    result = CliRunner().invoke(app, [str(a) for a in args], terminal_width=400)
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # nothing escaped the handler
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.fixture
def crashes(tmp_path, monkeypatch):
    """crosstune's cache (CROSSTUNE_CACHE) in the test's folder; its crash folder."""
    monkeypatch.setenv("CROSSTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CROSSTUNE_DEBUG", raising=False)
    return tmp_path / "cache" / "crashes"


def test_a_name_too_long_and_a_link_loop_in_out_are_one_line(tmp_path, crashes):
    """Real ones, through `model tiny --out`: ENAMETOOLONG from the stat, RuntimeError from pathlib's resolve."""
    long = tmp_path / ("a" * 300)
    said = one_line(["model", "tiny", "--family", "gemma4", "--out", long])
    assert said == (
        f"error: {long}: looking it up failed (File name too long): a name in it is longer than the file "
        "system allows (255 bytes): shorten it"
    )
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    said = one_line(["model", "tiny", "--family", "gemma4", "--out", tmp_path / "loop1" / "m"])
    assert said == (
        f"error: {tmp_path / 'loop1' / 'm'}: resolving failed (Too many levels of symbolic links): a link "
        "loop (links pointing at each other): fix or remove the link"
    )
    assert not crashes.exists()  # none of them is a bug


def _fails_with(call):
    """`serve plan` of the tiny recipe, its rendering (crosstune.serve.render) replaced by `call`, under the real
    handler: the failure is raised from inside a command, where no code of the command catches it."""
    import crosstune.serve.render

    def run(monkeypatch):
        monkeypatch.setattr(crosstune.serve.render, "render_serve_plan", lambda *a, **k: call())
        return one_line(["serve", "plan", RECIPES / "tiny-cpu.yaml"])

    return run


def test_each_kind_of_os_error_is_one_line_naming_the_path_and_what_failed(tmp_path, crashes, monkeypatch):
    """Real failing calls, made where the command builds: the message is the path, what failed, why, what to do."""
    afile, adir, link = tmp_path / "afile", tmp_path / "adir", tmp_path / "link"
    afile.write_text("keep me")
    adir.mkdir()
    link.symlink_to(adir)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    cases = {
        "parent is a file": (
            lambda: (afile / "sub").mkdir(),
            f"{afile / 'sub'}: making the folder failed (Not a directory): a part of the path is a file, not a folder",
        ),
        "a folder for a file": (
            lambda: open(adir, "w"),  # noqa: SIM115
            f"{adir}: opening failed (Is a directory): it is a folder where a file is expected: give a file",
        ),
        "a link loop": (
            lambda: loop.read_text(),
            f"{loop}: opening failed (Too many levels of symbolic links): a link loop",
        ),
        "rmtree on a link": (
            lambda: shutil.rmtree(link),
            f"{link}: removing the folder failed (Cannot call rmtree on a symbolic link)",
        ),
        "a rename across": (
            lambda: os.rename(adir, afile),
            f"{adir} → {afile}: moving failed (Not a directory)",
        ),
    }
    for name, (call, expected) in cases.items():
        said = _fails_with(call)(monkeypatch)
        assert said.startswith(f"error: {expected}"), (name, said)
    assert afile.read_text() == "keep me" and adir.is_dir() and not crashes.exists()


def test_an_undecodable_file_is_named(tmp_path, crashes, monkeypatch):
    latin1 = tmp_path / "notes.txt"
    latin1.write_bytes(b"caf\xe9\n")

    def read_by_pathlib():
        latin1.read_text(encoding="utf-8")

    def read_an_open_file():
        with open(latin1, encoding="utf-8") as f:
            f.read()

    for read in (read_by_pathlib, read_an_open_file):
        said = _fails_with(read)(monkeypatch)
        assert said.startswith(f"error: {latin1}: not valid utf-8 (invalid continuation byte): save it as UTF-8")
    assert not crashes.exists()


def test_a_bug_is_one_line_naming_its_crash_file_which_holds_the_traceback(tmp_path, crashes, monkeypatch):
    def a_bug_deep_inside():
        return {}["missing"]

    said = _fails_with(a_bug_deep_inside)(monkeypatch)
    (crash,) = crashes.iterdir()
    assert said == (
        f"error: a bug in crosstune: KeyError: 'missing'; its traceback is in {crash}: please report it "
        "with that file (CROSSTUNE_DEBUG=1 shows it here)"
    )
    text = crash.read_text()
    assert text.startswith("crosstune ") and "Traceback (most recent call last)" in text
    assert "in a_bug_deep_inside" in text and text.rstrip().endswith("KeyError: 'missing'")


def test_a_bug_s_message_and_a_user_s_text_are_kept_on_one_line_with_control_characters_escaped(
    tmp_path, crashes, monkeypatch
):
    def a_bug():
        raise ValueError("two\nlines \x1b[2J")

    said = _fails_with(a_bug)(monkeypatch)
    assert said.startswith("error: a bug in crosstune: ValueError: two\\nlines \\x1b[2J; its traceback is in")
    afile = tmp_path / "afile"
    afile.write_text("")
    said = one_line(["model", "tiny", "--family", "gemma4", "--out", afile / "\x1b[31mred"])
    assert "\x1b" not in said and f"{afile}/\\x1b[31mred is inside {afile}, which is a file" in said


def test_crosstune_debug_shows_a_bug_s_traceback_instead(tmp_path, crashes):
    """In a process of its own, as a user runs it: stderr is the traceback, no crash file; without the variable, one
    line and the file."""
    code = (
        "import crosstune.serve.render as r\nr.render_serve_plan = lambda *a, **k: 1 / 0\n"
        "from crosstune.cli import main\nmain()\n"
    )
    args = [sys.executable, "-c", code, "serve", "plan", str(RECIPES / "tiny-cpu.yaml")]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "CROSSTUNE_CACHE": str(tmp_path / "cache")}
    shown = subprocess.run(args, capture_output=True, text=True, env={**env, "CROSSTUNE_DEBUG": "1"}, timeout=120)
    assert shown.returncode == 1 and "Traceback (most recent call last)" in shown.stderr
    assert shown.stderr.rstrip().endswith("ZeroDivisionError: division by zero") and not crashes.exists()
    kept = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    (crash,) = crashes.iterdir()
    assert kept.returncode == 1 and "Traceback" not in kept.stderr
    assert kept.stderr.strip().splitlines() == [
        f"error: a bug in crosstune: ZeroDivisionError: division by zero; its traceback is in {crash}: please report "
        "it with that file (CROSSTUNE_DEBUG=1 shows it here)"
    ]


@pytest.mark.parametrize(
    ("args", "expected", "code"),
    [
        (["serve", "plan", "TINY", "--target", "nowhere"], "error: --target 'nowhere': one of ", 1),
        (["serve", "plan", "TINY", "--kv-cache-dtype", "fp4"], "error: --kv-cache-dtype 'fp4': one of auto, fp8", 1),
        (["model", "tiny", "--family", "llama", "--out", "OUT"], "error: ", 1),
    ],
    ids=["serve-target", "kv-cache-dtype", "model-family"],
)
def test_a_refusal_of_a_value_is_exit_1_and_one_line(tmp_path, args, expected, code):
    """What typer.BadParameter once refused (a boxed usage screen, exit 2) is the project's own error."""
    args = [str(RECIPES / "tiny-cpu.yaml") if a == "TINY" else str(tmp_path / "m") if a == "OUT" else a for a in args]
    assert one_line(args, code).startswith(expected)


def test_typer_s_own_usage_errors_keep_exit_2():
    result = CliRunner().invoke(
        app, ["serve", "plan", str(RECIPES / "tiny-cpu.yaml"), "--tp", "abc"], terminal_width=400
    )
    assert result.exit_code == 2 and "Usage: crosstune serve plan" in result.output  # typer's box, as it was


def test_a_corpus_error_during_a_model_build_is_not_blamed_on_shards(tmp_path, monkeypatch):
    """`model tiny|build` caught every ValueError of the build as a shard count's ("--shards 1: the corpus only
    supports 300 tokens"); only the shard count's own error is the option's now."""
    import crosstune.models.cli
    from crosstune.models.tokenizer import train_tokenizer

    monkeypatch.setattr(
        crosstune.models.cli, "build_checkpoint", lambda *a, **k: train_tokenizer("gemma3", ["module a;"] * 10)
    )
    said = one_line(["model", "tiny", "--family", "gemma4", "--out", tmp_path / "m"])
    assert said.startswith("error: the corpus only supports ") and "--shards" not in said
    assert not (tmp_path / "m").exists()


def test_a_bug_under_an_argument_of_undecodable_bytes_still_writes_its_crash_file(tmp_path, crashes):
    """An argument of bytes that aren't UTF-8 reaches sys.argv as lone surrogates: writing the crash file's command
    line raised UnicodeEncodeError inside the handler, a bare traceback (found by the fuzzer)."""
    code = (
        "import sys; sys.argv = ['crosstune', 'recipe', 'show', 'r.yaml', '--set', 'name=\\udcff']; "
        "from crosstune import cli\n"
        "try:\n    {}['missing']\nexcept KeyError as e:\n    print(cli.write_crash(e))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    crash = crashes / done.stdout.strip().rsplit("/", 1)[-1]
    assert "command: crosstune recipe show r.yaml --set name=\\udcff" in crash.read_text(encoding="utf-8")
