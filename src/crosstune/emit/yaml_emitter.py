"""The one YAML emitter: a value (mappings, lists, strings, numbers, booleans, None) as YAML text, optionally under
head comments. PyYAML's safe_dump does the writing; this adds the two things a value needs to come back as itself
from every reader:

- Quoting for both YAML versions. PyYAML quotes a string that YAML 1.1 would read as another type (`yes`, `1_000`),
  but crosstune reads its recipes with YAML 1.2's core schema (crosstune.untrusted_files.StrictLoader), where the
  plain `1e5` and `0o17` are numbers; SkyPilot and Kubernetes read specs with 1.1-style loaders. A string either
  version would read as another type is quoted.
- A check: the text is read back (by crosstune's strict reader and by PyYAML's own) and must give the value, or
  EmitError (a bug) is raised before anything is written. No value — a key or string with a newline, `: `, `#`,
  `---`, a U+2028 — can add a key, a line or a document.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterable
from typing import Any

import yaml

from crosstune.emit.comments import comment_lines
from crosstune.untrusted_files import YAML12_RESOLVERS, DumpedLoader, UnreadableFile, parse_yaml, parse_yaml_node


class EmitError(ValueError):
    """A value the YAML emitter would not write back as itself (a bug in the writer or a type YAML can't hold)."""


class _Dumper(yaml.SafeDumper):
    """safe_dump's representers, no anchors and aliases (a reader expands them), and a string quoted whenever YAML
    1.1 or 1.2 would read it plain as something else."""

    yaml_implicit_resolvers = copy.deepcopy(yaml.SafeDumper.yaml_implicit_resolvers)

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _one_line_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    """A string holding a line break or another control character is written double-quoted with escapes: its line
    breaks start no line of the file."""
    style = None if text.isprintable() else '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


for _tag, _pattern, _first in YAML12_RESOLVERS:
    _Dumper.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))
_Dumper.add_representer(str, _one_line_str)


class _BlockDumper(_Dumper):
    """Multi-line strings (a job's setup and run scripts) as literal blocks, as people write them; PyYAML falls back
    to a quoted scalar where a literal block can't hold the string exactly."""


_BlockDumper.add_representer(
    str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|") if "\n" in s else _one_line_str(d, s)
)


def yaml_text(
    value: Any,
    *,
    head: Iterable[str] = (),
    blocks: bool = False,
    width: int | None = None,
    allow_unicode: bool = False,
) -> str:
    """`value` as YAML text (keys in their order), under `head` as comment lines; `blocks`: multi-line strings as
    literal blocks; `width`: where long plain scalars fold (PyYAML's default 80). EmitError when the text would not
    read back as `value`."""
    dumper = _BlockDumper if blocks else _Dumper
    body = yaml.dump(value, Dumper=dumper, sort_keys=False, allow_unicode=allow_unicode, width=width)
    text = comment_lines(head) + body
    check_round_trip(text, value)
    return text


def check_round_trip(text: str, value: Any) -> None:
    """EmitError unless `text` reads back as `value` with crosstune's strict YAML 1.2 reader and PyYAML's 1.1 one."""
    try:
        strict = parse_yaml(text, "<YAML being written>")
        loose = parse_yaml_node(text, "<YAML being written>", DumpedLoader)[0]
    except UnreadableFile as e:
        raise EmitError(f"the YAML written would not read back: {e}") from None
    for reader, got in (("YAML 1.2", strict), ("YAML 1.1", loose)):
        if (where := _difference(value, got)) is not None:
            raise EmitError(f"the YAML written would read back differently under {reader} at {where or 'the top'}")


def _difference(want: Any, got: Any, where: str = "") -> str | None:
    """The path of the first place `got` differs from `want` in type or value (None: nowhere)."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or list(want) != list(got):
            return where
        return next((w for k in want if (w := _difference(want[k], got[k], f"{where}.{k}")) is not None), None)
    if isinstance(want, list):
        if not isinstance(got, list) or len(want) != len(got):
            return where
        found = (_difference(a, b, f"{where}[{i}]") for i, (a, b) in enumerate(zip(want, got, strict=True)))
        return next((w for w in found if w is not None), None)
    if type(want) is not type(got):
        return where
    if isinstance(want, float) and math.isnan(want):
        return None if math.isnan(got) else where
    return None if want == got else where
