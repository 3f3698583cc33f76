"""The emitters (crosstune.emit): no value can add a key, a line or a command to a file crosstune writes, per format.
YAML is read back by both readers (crosstune's strict YAML 1.2 and PyYAML's 1.1) and must give the value; a head
comment stays one comment line each; a shell line run by bash gives each value back as one word and runs nothing
else. The writers that use them are tested with the same values in tests/recipe/test_written_configs.py and
tests/launch/test_slurm_spec.py."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from crosstune.emit import Raw, comment_lines, json_text, shell_line, shell_words, yaml_text
from crosstune.emit.yaml_emitter import EmitError, check_round_trip
from crosstune.untrusted_files import DumpedLoader, parse_yaml, parse_yaml_node
from tests.helpers.paths import REPO

# Text that ends a YAML value, starts a key, a document, a comment or a shell command if pasted as it is
HOSTILE = [
    "a\noutput_dir: /etc",
    "x: y",
    "- item",
    "---\nb: 1",
    "# not a comment",
    "a\u2028push_to_hub: true",
    "a\x85b: c",
    "a\rb: c",
    "\ttab",
    "'quoted'",
    '"double"',
    "{a: 1}",
    "[1, 2]",
    "&anchor",
    "*alias",
    "!!python/object/apply:os.system [id]",
    "yes",
    "no",
    "on",
    "1e5",
    "0o17",
    "0x1F",
    "1_000",
    "12:30",
    ".inf",
    "~",
    "null",
    "",
    " leading space",
    "trailing space ",
    "$(touch PWNED)",
    "`touch PWNED`",
    "a; touch PWNED",
    "a && touch PWNED",
    "a | touch PWNED",
    "\\",
    "é😀",
    "\x1b[31mred",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_yaml_value_or_key_reads_back_as_itself_and_adds_no_key(text):
    value = {"name": text, text or "empty": [text, {"inner": text}], "n": 3, "f": 1e-4, "t": True, "z": None}
    for options in ({}, {"blocks": True, "width": 1000}, {"allow_unicode": True}):
        written = yaml_text(value, **options)
        assert parse_yaml(written, "w") == value
        assert parse_yaml_node(written, "w", DumpedLoader)[0] == value
        assert not [line for line in written.splitlines() if line.startswith(("output_dir", "push_to_hub", "b:"))]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_head_comment_is_one_comment_line_whatever_it_holds(text):
    written = yaml_text({"a": 1}, head=[f"made from {text}", "second"])
    head = written.splitlines()[:2]
    assert all(line.startswith("# ") for line in head) and written.splitlines()[2] == "a: 1"
    assert parse_yaml(written, "w") == {"a": 1}
    assert comment_lines([text]).count("\n") == 1


def test_a_value_no_reader_gives_back_is_refused_before_anything_is_written():
    with pytest.raises(EmitError, match="read back differently"):
        check_round_trip("a: 1\nb: 2\n", {"a": 1})
    with pytest.raises(EmitError, match="at .a"):
        check_round_trip("a: '1'\n", {"a": 1})
    with pytest.raises(EmitError, match="would not read back"):
        check_round_trip("a: [\n", {"a": []})


def _bash_words(line: str, tmp_path: Path) -> list[str]:
    """The words bash reads off `line` (a command of its own prints them, NUL-separated), run in tmp_path."""
    script = f"words() {{ printf '%s\\0' \"$@\"; }}\n{line}\n"
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, timeout=30, check=True)
    return done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


def test_a_shell_value_is_one_word_on_one_line_and_runs_nothing(tmp_path):
    values = [*HOSTILE, "\udcff"]  # and a lone surrogate: an undecodable byte of a file name
    line = shell_line("words {values} {single} {raw}", values=values, single="a\nb", raw=Raw('"$HOME"'))
    assert "\n" not in line
    assert _bash_words(line, tmp_path) == [*values, "a\nb", str(Path.home())]
    assert not (tmp_path / "PWNED").exists()
    assert _bash_words(f"words {shell_words(['x y', 'z'])}", tmp_path) == ["x y", "z"]


def test_a_shell_template_is_one_line():
    with pytest.raises(ValueError, match="one line"):
        shell_line("a\n{b}", b="c")


def test_a_json_value_reads_back_as_itself_and_what_json_can_t_hold_is_refused():
    """The JSON emitter (LLaMA-Factory's dataset_info.json): a key or value with a newline, a quote or U+2028 is one
    string of one entry; NaN, a key that is not a string and a type JSON lacks are EmitError, nothing written."""
    import json

    value = {'a\n"b": 1, "c': ["x\u2028y", "}"], "ok": {"n": 1.5, "t": True, "z": None}}
    text = json_text(value)
    assert json.loads(text) == value and text.endswith("}\n") and "\u2028" not in text
    for bad in ({"x": float("nan")}, {1: "a"}, {"x": (1, 2)}, {"x": object()}):
        with pytest.raises(EmitError):
            json_text(bad)


def emitters_outside(root: Path) -> list[str]:
    """file:line of every YAML dump or shell quoting under `root` outside crosstune/emit/: a writer of its own."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("emit/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
            module = node.value.id if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) else ""
            if (module == "yaml" and name in ("dump", "safe_dump", "dump_all", "emit", "serialize")) or (
                module == "shlex" and name in ("quote", "join")
            ):
                found.append(f"{rel}:{node.lineno}: {module}.{name}")
            if isinstance(node, ast.ImportFrom) and node.module in ("shlex", "yaml"):
                found += [f"{rel}:{node.lineno}: from {node.module} import {a.name}" for a in node.names]
    return found


def test_every_yaml_and_shell_text_is_written_by_the_one_emitter(tmp_path):
    assert emitters_outside(REPO / "src" / "crosstune") == []
    mine = tmp_path / "writer.py"
    mine.write_text("import yaml, shlex\nfrom shlex import quote\nt = yaml.safe_dump({}) + shlex.join([])\n")
    assert emitters_outside(tmp_path) == [
        "writer.py:2: from shlex import quote",
        "writer.py:3: yaml.safe_dump",
        "writer.py:3: shlex.join",
    ]
