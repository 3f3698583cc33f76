"""The one reader of JSON, JSONL and YAML that crosstune did not just build in memory: recipes and `--set` values,
prices and workloads, data and samples files, problem sets, manifests, run.json and bundle.json read back, imported
Axolotl/TRL configs, model configs, headers. Every one is parsed here, within bounds, and every refusal is
`FILE:LINE: what is wrong` (UnreadableFile: an InputError, and a ValueError for callers that catch the parser's).

Bounds: a document (or one JSONL line) of at most MAX_BYTES; containers nested at most MAX_DEPTH deep; YAML aliases
expanding to at most MAX_NODES values (a 1 KB "billion laughs" recipe is refused at once, and an alias inside its own
anchor as nesting without end); numbers of at most MAX_DIGITS digits (Python refuses 4,300 with a traceback, and a
thousand-digit int overflows any float it meets). Duplicate keys are refused in JSON as in YAML.

YAML is YAML 1.2's core schema on top of PyYAML's safe loader. PyYAML implements YAML 1.1, which reads
`yes`/`no`/`on`/`off` as booleans (`name: no` becomes False), `1:30` as 90, `0777` as 511, `2026-01-15` as a date,
and `1e-4` as the *string* "1e-4"; and it keeps the last of two equal keys without a word. Here only true/false are
booleans, numbers are YAML 1.2 numbers (`1e-4` is a float), dates stay strings, and `a: 1` twice is refused with
both lines.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from crosstune.errors import InputError
from crosstune.units import MIB

MAX_BYTES = 64 * MIB  # a document, or one JSONL line
MAX_DEPTH = 100  # lists and mappings inside each other
MAX_NODES = 100_000  # YAML values once every alias is expanded
MAX_DIGITS = 100  # digits of one number (a 64-bit int has 19; a float's shortest repr at most 17 plus exponent)


class UnreadableFile(InputError, ValueError):
    """`FILE:LINE: reason` (no line when none applies). `kind` names the class: bad_json, bad_yaml, invalid_utf8,
    too_large, too_deep, too_many_values, too_many_digits, duplicate_key, not_a_file."""

    def __init__(self, where: str | Path, line: int | None, reason: str, kind: str, what_to_do: str = ""):
        self.where, self.line, self.reason, self.kind = str(where), line, reason, kind
        head = f"{where}:{line}" if line else str(where)
        super().__init__(f"{head}: {reason}" + (f": {what_to_do}" if what_to_do else ""))


class _Refused(Exception):
    """Raised inside the JSON decoder's hooks; `token` is the text that locates it."""

    def __init__(self, reason: str, kind: str, token: str):
        super().__init__(reason)
        self.reason, self.kind, self.token = reason, kind, token


def _digits_checked(text: str) -> str:
    digits = sum(c.isdigit() for c in text)
    if digits > MAX_DIGITS:
        raise _Refused(f"a number of {digits} digits (at most {MAX_DIGITS})", "too_many_digits", text)
    return text


def _unique(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _Refused(f"duplicate key {key!r}: keep one of them", "duplicate_key", json.dumps(key))
    return out


_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique,
    parse_int=lambda s: int(_digits_checked(s)),
    parse_float=lambda s: float(_digits_checked(s)),
)


def _line_at(text: str, index: int) -> int:
    return text.count("\n", 0, max(index, 0)) + 1


def _too_deep_line(text: str) -> int:
    """The line where JSON text first nests deeper than MAX_DEPTH (strings skipped)."""
    depth = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        tok = m.group()
        if tok in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return _line_at(text, m.start())
        elif tok in "]}":
            depth -= 1
    return 1


def _depth_exceeded(value: Any) -> bool:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        items = node.values() if isinstance(node, dict) else node
        stack += [(v, depth + 1) for v in items if isinstance(v, dict | list)]
    return False


def _text(data: str | bytes, where: str | Path, first_line: int) -> str:
    if len(data) > MAX_BYTES:
        raise UnreadableFile(where, None, f"{len(data)} bytes, more than the {MAX_BYTES // MIB} MiB read", "too_large")
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + data.count(b"\n", 0, e.start)
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1)
        raise UnreadableFile(where, line, f"invalid UTF-8 at byte {column} of the line", "invalid_utf8") from None


def parse_json(data: str | bytes, where: str | Path, *, first_line: int = 1, what_to_do: str = "") -> Any:
    """JSON text (or UTF-8 bytes) from `where` (its first line numbered `first_line`) within the bounds."""
    text = _text(data, where, first_line)
    try:
        value = _DECODER.decode(text)
        deep = isinstance(value, dict | list) and _depth_exceeded(value)
    except json.JSONDecodeError as e:
        reason = f"not valid JSON: {e.msg} (column {e.colno})"
        raise UnreadableFile(where, first_line + e.lineno - 1, reason, "bad_json", what_to_do) from None
    except _Refused as e:
        pattern = re.escape(e.token) + (r"\s*:" if e.kind == "duplicate_key" else "")
        found = [m.start() for m in re.finditer(pattern, text)] or [0]
        index = found[1] if e.kind == "duplicate_key" and len(found) > 1 else found[0]
        raise UnreadableFile(where, first_line + _line_at(text, index) - 1, e.reason, e.kind, what_to_do) from None
    except RecursionError:
        deep = True
    if deep:
        line = first_line + _too_deep_line(text) - 1
        raise UnreadableFile(where, line, f"nested deeper than {MAX_DEPTH} levels", "too_deep", what_to_do)
    return value


def read_json(path: str | Path, what_to_do: str = "") -> Any:
    """A JSON file; an UnreadableFile names it, the line and (with `what_to_do`) the fix."""
    return parse_json(_read_bytes(Path(path)), path, what_to_do=what_to_do)


def read_text(path: str | Path) -> str:
    """A UTF-8 text file of at most MAX_BYTES (for a parser of the caller's own that locates its problems)."""
    return _text(_read_bytes(Path(path)), path, 1)


def _open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading when it is a regular file; a folder, a pipe, a socket or a device is refused by name.
    Opened without blocking, then checked on the open file: opening a named pipe to read waits for a writer, forever
    when none comes, and a check before the open could be raced."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnreadableFile(path, None, "not a regular file", "not_a_file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_bytes(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_BYTES (a folder, a pipe or a device is refused by name)."""
    with _open_regular(path) as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise UnreadableFile(path, None, f"more than the {MAX_BYTES // MIB} MiB read", "too_large")
    return data


def jsonl_rows(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) per line of a JSONL file: the parsed value, None for a blank line, or an UnreadableFile
    for a bad one, which the caller raises or, with --lenient, skips and counts. A line longer than MAX_BYTES is
    not read into memory. A folder, a pipe or a device is refused by name before anything is read."""
    with _open_regular(Path(path)) as f:
        line_no = 0
        while raw := f.readline(MAX_BYTES + 1):
            line_no += 1
            if len(raw) > MAX_BYTES and not raw.endswith(b"\n"):
                while (rest := f.readline(MAX_BYTES)) and not rest.endswith(b"\n"):
                    pass
                yield line_no, UnreadableFile(path, line_no, f"a line of more than {MAX_BYTES // MIB} MiB", "too_large")
                continue
            try:
                text = _text(raw, path, line_no)
                yield line_no, (parse_json(text.rstrip("\r\n"), path, first_line=line_no) if text.strip() else None)
            except UnreadableFile as e:
                yield line_no, e


# YAML 1.2's core schema: (tag, the plain scalars it resolves, their first characters); crosstune.emit quotes a
# string any of these would read as another type
YAML12_RESOLVERS = [
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+0123456789.",
    ),
    ("tag:yaml.org,2002:merge", r"^<<$", "<"),
]


class StrictLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core scalars, duplicate keys refused and numbers of at most MAX_DIGITS digits."""

    yaml_implicit_resolvers: dict = {}

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
                seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: the base constructor says so
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"duplicate key {key!r} (first on line {first}): keep one of them",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)

    def _digits(self, node: yaml.ScalarNode) -> str:
        text = self.construct_scalar(node)
        try:
            return _digits_checked(text)
        except _Refused as e:
            raise yaml.constructor.ConstructorError(None, None, e.reason, node.start_mark) from None

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = self._digits(node)
        if text.startswith("0o"):
            return int(text[2:], 8)
        return int(text, 0) if text.startswith("0x") else int(text, 10)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        self._digits(node)
        return super().construct_yaml_float(node)


for _tag, _pattern, _first in YAML12_RESOLVERS:
    StrictLoader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))
StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)


class DumpedLoader(yaml.SafeLoader):
    """PyYAML's own YAML 1.1 reading, for a file its safe_dump wrote (a run's recipe.yaml): the exact inverse of the
    dump (a quoted "1e5" stays text and an unquoted 1e5 too), with the bounds of StrictLoader."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        StrictLoader._digits(self, node)  # type: ignore[arg-type]
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        StrictLoader._digits(self, node)  # type: ignore[arg-type]
        return super().construct_yaml_float(node)


DumpedLoader.add_constructor("tag:yaml.org,2002:int", DumpedLoader.construct_yaml_int)
DumpedLoader.add_constructor("tag:yaml.org,2002:float", DumpedLoader.construct_yaml_float)


def _bounded(root: yaml.Node, where: str | Path) -> None:
    """Refuse a node tree nested deeper than MAX_DEPTH or holding more than MAX_NODES values with aliases expanded,
    before anything walks it (the constructor shares an alias's value; every later walk expands it)."""
    count, stack = 0, [(root, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        line = node.start_mark.line + 1
        if depth > MAX_DEPTH:
            reason = f"nested deeper than {MAX_DEPTH} levels (or an alias inside its own anchor)"
            raise UnreadableFile(where, line, reason, "too_deep")
        if count > MAX_NODES:
            reason = f"aliases expand to more than {MAX_NODES:,} values: write the values out, or alias less"
            raise UnreadableFile(where, line, reason, "too_many_values")
        if isinstance(node, yaml.MappingNode):
            stack += [(n, depth + 1) for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            stack += [(n, depth + 1) for n in node.value]


def _yaml_problem(e: yaml.YAMLError) -> tuple[str, int | None]:
    mark = getattr(e, "problem_mark", None)
    reason = str(getattr(e, "problem", None) or e).strip().replace("\n", " ")
    return reason, (mark.line + 1 if mark is not None else None)


def parse_yaml_node(
    data: str | bytes, where: str | Path, loader_class: type[yaml.SafeLoader] = StrictLoader
) -> tuple[Any, yaml.Node | None]:
    """(the value, its checked node tree for locating YAML paths) of YAML text from `where`."""
    text = _text(data, where, 1)
    try:
        loader = loader_class(text)  # PyYAML's reader checks the characters here: a NUL raises before any parse
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        reason = f"not valid YAML: {e.reason} (U+{e.character:04X})"
        raise UnreadableFile(where, line, reason, "bad_yaml") from None
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        _bounded(root, where)
        return loader.construct_document(root), root
    except yaml.YAMLError as e:
        reason, line = _yaml_problem(e)
        raise UnreadableFile(where, line, f"not valid YAML: {reason}", "bad_yaml") from None
    except RecursionError:
        reason = f"nested deeper than {MAX_DEPTH} levels"
        raise UnreadableFile(where, loader.line + 1, reason, "too_deep") from None
    finally:
        loader.dispose()


def parse_yaml(data: str | bytes, where: str | Path) -> Any:
    """YAML text (or UTF-8 bytes) from `where`, strictly and within the bounds."""
    return parse_yaml_node(data, where)[0]


def read_yaml(path: str | Path, *, dumped: bool = False) -> Any:
    """A YAML file, strictly and within the bounds; `dumped`: one that yaml.safe_dump wrote (DumpedLoader)."""
    return parse_yaml_node(_read_bytes(Path(path)), path, DumpedLoader if dumped else StrictLoader)[0]
