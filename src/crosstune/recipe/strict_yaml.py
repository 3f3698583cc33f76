"""The one YAML loader for files a user writes (recipes, `--set` values, prices, TCO workloads): YAML 1.2's core
schema on top of PyYAML's safe loader, and a duplicate key is an error.

PyYAML implements YAML 1.1, which reads `yes`/`no`/`on`/`off` as booleans (`name: no` becomes False), `1:30` as 90,
`0777` as 511, `2026-01-15` as a date, and `1e-4` as the *string* "1e-4"; and it keeps the last of two equal keys
without a word. Here only true/false are booleans, numbers are YAML 1.2 numbers (`1e-4` is a float), dates stay
strings, and `a: 1` twice is refused with both lines.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_RESOLVERS = [
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
    """SafeLoader with YAML 1.2 core scalars and duplicate keys refused."""

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
                    "while constructing a mapping", node.start_mark,
                    f"duplicate key {key!r} (first on line {first}): keep one of them", key_node.start_mark,
                )  # fmt: skip
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = self.construct_scalar(node)
        if text.startswith("0o"):
            return int(text[2:], 8)
        return int(text, 0) if text.startswith("0x") else int(text, 10)


for _tag, _pattern, _first in _RESOLVERS:
    StrictLoader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))
StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)


def load_yaml(text: str) -> Any:
    """Parse `text` strictly; yaml.YAMLError (with a mark: line, column) on anything the loader refuses."""
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - StrictLoader is a SafeLoader


def yaml_problem(e: yaml.YAMLError) -> tuple[str, int | None]:
    """(the reason in one line, its 1-based line or None) of a YAML error."""
    mark = getattr(e, "problem_mark", None)
    reason = str(getattr(e, "problem", None) or e).strip().replace("\n", " ")
    return reason, (mark.line + 1 if mark is not None else None)
