"""The command line: --help lists the pipeline and its paragraphs wrap cleanly, doctor reports what this machine
has."""

import re

import typer
from typer.testing import CliRunner

from crosstune.cli import _register, app, unwrapped

_register()
runner = CliRunner()


def test_help_lists_pipeline_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("doctor", "demo", "recipe", "data", "model"):
        assert command in result.output


def _commands(group, path=()):
    yield path, group
    for name, command in getattr(group, "commands", {}).items():
        yield from _commands(command, (*path, name))


def test_every_help_paragraph_is_one_line_for_rich_to_wrap():
    """Docstrings break their lines at 120 columns; rich kept those breaks inside its own wrapping, so `crosstune
    study --help` broke mid-sentence. Every command's help has them joined as the command tree is built."""
    for path, command in _commands(typer.main.get_command(app)):
        for paragraph in (command.help or "").partition("\f")[0].split("\n\n"):  # after \f: not shown
            lines = paragraph.split("\n")
            assert all(line.startswith("- ") for line in lines[1:]), (" ".join(path), paragraph)
    result = runner.invoke(app, ["study", "--help"], terminal_width=100)
    prose = re.split(r"\n\s*\n", result.output.split("╭")[0].strip())  # usage, first paragraph, the others
    second = [line.strip() for line in prose[2].splitlines()]
    assert len(second) > 5 and all(len(line) > 60 for line in second[:-1]), second  # wrapped by rich, at 100


def test_a_paragraph_s_line_breaks_are_joined_but_lists_and_examples_are_kept():
    text = (
        "First line\n    goes on.\n\n    Second\n    paragraph.\n\n    - one item\n      continued\n    - two\n\n"
        "        indented example\n        kept"
    )
    assert unwrapped(text) == (
        "First line goes on.\n\nSecond paragraph.\n\n- one item continued\n- two\n\n    indented example\n    kept"
    )
    assert unwrapped("Shown\n    here.\n    \f\n    Not shown.") == "Shown here.\f\nNot shown."
    assert "Over 80 lines" not in runner.invoke(app, ["bench", "serve", "--help"]).output  # after its \f


def test_doctor_reports_stacks_and_devices():
    result = runner.invoke(app, ["doctor"], terminal_width=200)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "2.13.0" in out  # torch
    assert "0.10.2" in out and "8 × cpu" in out  # jax sees the 8 fake devices from XLA_FLAGS
    assert "5.12.1" in out and "0.1.7" in out and "0.1.8" in out  # transformers, tunix, qwix
    assert "11.0" in out  # Debian's iverilog
    assert "vllm" in out
