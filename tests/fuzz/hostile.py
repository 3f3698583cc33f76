"""Hostile inputs, drawn from a seeded random.Random: option values, file contents (whole-file and one value
changed inside a valid document) and filesystem entries (links in and out, loops, folders and FIFOs where files
belong, /dev/zero, odd names); each draw says what it did (`note`)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import yaml

HUGE = "9" * 5000  # past Python's int-digit limit (4300) and every bound
# numbers as a user types them: signs, limits, exponents, digits of other scripts (int() reads them), words
NUMBERS = [
    "-1",
    "0",
    "1",
    "2147483648",
    "18446744073709551616",
    HUGE,
    "1e309",
    "-1e309",
    "1e-320",
    "nan",
    "inf",
    "-inf",
    "-0",
    "0x10",
    "1_000",
    "١٢",
    "１２",
    "٣.٥",
    " 7",
    "7 ",
    "",
    "2**31",
    "1e6",
    "3.7",
    "true",
    "[]",
]
# strings: empty, control characters, very long, right-to-left, shell and format syntax, paths and schemes, a lone
# surrogate (an undecodable byte in argv reads as one)
STRINGS = [
    "",
    " ",
    "\n",
    "a\nb",
    "x" * 10_000,
    "é" * 300,
    "\u202etxt.exe",
    "../../x",
    "/",
    ".",
    "..",
    "-",
    "$(touch PWNED)",
    "`id`",
    "'",
    '"',
    "\\",
    "%s%n{0}",
    "😀",
    "a:b=c",
    "--help",
    "gs://",
    "GS://b",
    "s3:/b",
    "file:///etc",
    "\udcff\udcfe",
    "a" * 300 + "/" + "b" * 300,
    "\t",
    "null",
    "~",
]
# values put into a parsed document in place of one of its values
VALUES = [
    -1,
    0,
    1,
    2**31,
    10**30,
    1e308,
    -1e-308,
    float("nan"),
    float("inf"),
    "",
    "x" * 10_000,
    "١٢",
    "１２",
    "0x10",
    "nan",
    [],
    {},
    None,
    True,
    False,
    [1, "a", None],
    {"a": {"b": {"c": 1}}},
    "@@HUGE@@",
    "@@DEEP@@",
    "é😀",
]
WHOLE_FILES = [
    "alias_bomb",
    "recursive_alias",
    "deep_list",
    "deep_json",
    "invalid_utf8",
    "nul",
    "bom",
    "empty",
    "python_tag",
    "duplicate_key",
    "binary",
    "long_line",
    "crlf",
    "truncated",
    "not_a_mapping",
]
ENTRIES = ["link_out_file", "link_out_dir", "dangling", "loop", "folder", "fifo", "dev_zero", "link_in"]


def number(rng: random.Random) -> str:
    return rng.choice(NUMBERS)


def string(rng: random.Random) -> str:
    return rng.choice(STRINGS)


def value(rng: random.Random) -> str:
    return number(rng) if rng.random() < 0.5 else string(rng)


def _leaves(doc, path=()):
    """Paths to every value in a parsed document (containers too)."""
    yield path
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, child in items:
        yield from _leaves(child, (*path, key))


def _dump(doc, kind: str) -> str:
    text = json.dumps(doc) if kind == "json" else yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    deep = "[" * 10_000 + "]" * 10_000
    for quote in ('"', "'", ""):
        text = text.replace(f"{quote}@@HUGE@@{quote}", HUGE).replace(f"{quote}@@DEEP@@{quote}", deep)
    return text


def one_value_changed(rng: random.Random, doc, kind: str) -> tuple[str, str]:
    """The document (parsed) with one value, or a new key, replaced by a hostile one; (text, note)."""
    if not isinstance(doc, (dict, list)):
        doc = {"value": doc}
    paths = [p for p in _leaves(doc) if p]
    new = rng.choice(VALUES)
    head: list = []
    if not paths or rng.random() < 0.15 or not isinstance(doc, dict):
        target = doc if isinstance(doc, dict) else {"value": doc}
        key = rng.choice(["unknown_key", "x" * 300, "é", ""])
        doc = target
    else:
        *head, key = rng.choice(paths)
        target = doc
        for k in head:
            target = target[k]
    target[key] = new
    shown = repr(new) if len(repr(new)) < 40 else repr(new)[:37] + "..."
    return _dump(doc, kind), f"{'.'.join(map(str, [*head, key]))} = {shown}"


def whole_file(rng: random.Random, valid: bytes, kind: str) -> tuple[bytes, str]:
    """A hostile file in place of a valid one (kind: yaml, json or jsonl); (bytes, note)."""
    how = rng.choice(WHOLE_FILES)
    cut = rng.randrange(len(valid) + 1)
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    made = {
        "alias_bomb": laughs.encode(),
        "recursive_alias": b"a: &a\n  - b: *a\n",
        "deep_list": b"a: " + b"[" * 10_000 + b"]" * 10_000 + b"\n",
        "deep_json": b'{"a": ' + b"[" * 10_000 + b"]" * 10_000 + b"}\n",
        "invalid_utf8": valid[:cut] + b"\xff\xfe\xc3" + valid[cut:],
        "nul": valid[:cut] + b"\x00" + valid[cut:],
        "bom": b"\xef\xbb\xbf" + valid,
        "empty": b"",
        "python_tag": b"!!python/object/apply:os.system ['touch PWNED']\n",
        "duplicate_key": (
            b'{"a": 1, "a": 2}\n' if kind != "yaml" else valid + b"\n" + valid.split(b"\n", 1)[0] + b"\n"
        ),
        "binary": rng.randbytes(4096),
        "long_line": b'{"a": "' + b"x" * (3 << 20) + b'"}\n',
        "crlf": valid.replace(b"\n", b"\r\n"),
        "truncated": valid[: max(1, cut)],
        "not_a_mapping": b"[1, 2, 3]\n" if kind != "jsonl" else b"[1, 2, 3]\n" + valid,
    }[how]
    if kind == "jsonl" and how in ("alias_bomb", "recursive_alias", "python_tag"):
        made = valid[:cut] + made  # JSONL has no aliases or tags: a line of YAML among JSON lines
    return made, f"whole file: {how}"


def content(rng: random.Random, valid: bytes, kind: str) -> tuple[bytes, str]:
    """Half the time the whole file, else one value inside the document (JSONL: inside one line); the whole file
    too when the document does not parse (a listing of names, a file an earlier change broke: its nesting too deep for
    Python's json or YAML reader is a RecursionError)."""
    if rng.random() < 0.5:
        return whole_file(rng, valid, kind)
    try:
        if kind == "jsonl":
            lines = valid.decode().splitlines()
            i = rng.choice([n for n, line in enumerate(lines) if line.strip()])
            text, note = one_value_changed(rng, json.loads(lines[i]), "json")
            lines[i] = text.replace("\n", " ")
            return ("\n".join(lines) + "\n").encode(), f"line {i + 1}: {note}"
        doc = json.loads(valid) if kind == "json" else yaml.safe_load(valid)
    except (ValueError, IndexError, RecursionError, yaml.YAMLError):
        return whole_file(rng, valid, kind)
    text, note = one_value_changed(rng, doc, kind)
    return text.encode(), note


def write_content(rng: random.Random, path: Path, kind: str) -> str:
    """Replace the file at path by a hostile version of itself; the note."""
    made, note = content(rng, path.read_bytes(), kind)
    path.write_bytes(made)
    return f"{path.name}: {note}"


def entry(rng: random.Random, path: Path, canary: Path, allowed: list[str] | None = None) -> str:
    """Replace what is at path (a file or folder of the tree) by a hostile filesystem entry; the note. Links out
    point at the canaries (a file with the token, or their folder)."""
    how = rng.choice(allowed or ENTRIES)
    _remove(path)
    if how == "link_out_file":
        path.symlink_to(rng.choice(sorted(p for p in canary.rglob("*") if p.is_file())))
    elif how == "link_out_dir":
        path.symlink_to(canary / "folder")
    elif how == "dangling":
        path.symlink_to(path.parent / "no-such-file")
    elif how == "loop":
        path.symlink_to(path.name)
    elif how == "folder":
        path.mkdir()
        (path / "inside.txt").write_text("a folder where a file belongs\n")
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "dev_zero":
        path.symlink_to("/dev/zero")
    elif how == "link_in":  # a link to a sibling inside the tree: allowed, and must still be read as what it is
        siblings = sorted(p for p in path.parent.iterdir() if p != path)
        path.symlink_to(siblings[0].name if siblings else ".")
    return f"{path.name}: {how}"


def odd_names(rng: random.Random, folder: Path) -> str:
    """A file with an odd name in a folder that is walked: undecodable bytes, a newline, 255 bytes."""
    name = rng.choice([b"bad\xffname.txt", b"new\nline.txt", b"x" * 255, b"-rf", b" lead", b"\xc3\xa9\xcc\x81.txt"])
    with open(os.path.join(os.fsencode(folder), name), "wb") as f:
        f.write(b"odd\n")
    return f"{folder.name}/{name!r}: an odd name"


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file() or path.exists() and not path.is_dir():
        path.unlink()
    elif path.is_dir():
        for child in sorted(path.rglob("*"), reverse=True):
            child.unlink() if child.is_symlink() or not child.is_dir() else child.rmdir()
        path.rmdir()
