"""A foreign config (Axolotl, TRL, LLaMA-Factory) read once into typed, bounded values before any of them is used.

Every key of a format's table (`Key`) has a kind — a whole number, a number, a switch, text, a list of text, a
mapping, a list of entries — and a number has a bound: the one of the recipe setting it maps to (crosstune.bounds),
or its own. A value of another kind is one line naming the file, line and key and saying what it should be; no
string is multiplied, no unknown type reaches the mapping. What the tools themselves accept from their YAML reader
(PyYAML's YAML 1.1, argparse's and pydantic's conversions) is accepted the same way: `yes` as true, "2.0e-4" and
"8" as numbers. A key the table does not know keeps its value untouched: the import lists it as not mapped and never
reads it."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crosstune import hub
from crosstune.bounds import RECIPE, Bound
from crosstune.errors import InputError, one_line

MAX_TEXT = 4096  # characters of one text value (a path, an id, a template name): PATH_MAX
MAX_ITEMS = 1000  # items of one list (target modules, datasets, plugins)
HUB_ID_MAX = 96  # characters of a hub id, owner/name (huggingface_hub's rule, crosstune.hub.HUB_ID)
# An owner/name in any letters and of any length: what a foreign config means as a hub id, checked against the hub's
# rule (crosstune.hub.is_hub_id) to refuse it by name rather than read it as a path
ID_SHAPE = re.compile(r"\A[^\W_](?:[\w-]|\.(?!\.))*/\w(?:[\w-]|\.(?!\.))*\Z")
SWITCH_WORDS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


class ForeignValueError(InputError):
    """A value of a foreign config of another type or range than its tool reads there: the file, line, key and what
    it should be."""


class _Wrong(Exception):
    """A value is not `expected` (caught where the key and its line are known)."""

    def __init__(self, expected: str):
        super().__init__(expected)
        self.expected = expected


Kind = Callable[[Any, "Key"], Any]


def whole(value: Any, key: Key) -> int:
    """An int (or its digits as text, or an integral float: what argparse and pydantic make of them) in bounds."""
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d{1,18}", value.strip()):
        value = int(value)
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 1e18:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Wrong("a whole number" + _span(key))
    return _in_bounds(value, key, "a whole number")


def number(value: Any, key: Key) -> float:
    """An int or float (or a decimal literal as text: YAML 1.1 reads `2e-4` as text, the tools convert it)."""
    if isinstance(value, str) and len(value) <= 64 and _DECIMAL.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Wrong("a number" + _span(key))
    return _in_bounds(float(value), key, "a number")


def switch(value: Any, key: Key) -> bool:
    if isinstance(value, str) and value.strip().lower() in SWITCH_WORDS:
        return SWITCH_WORDS[value.strip().lower()]
    if not isinstance(value, bool):
        raise _Wrong("true or false")
    return value


def text(value: Any, key: Key) -> str:
    if not isinstance(value, str):
        raise _Wrong("text (quote it if YAML reads it as a number or a switch)")
    if len(value) > MAX_TEXT:
        raise _Wrong(f"text of at most {MAX_TEXT:,} characters (this one has {len(value):,})")
    return value


def texts(value: Any, key: Key) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise _Wrong(f"a list of text (at most {MAX_ITEMS:,} items)")
    return [text(v, key) for v in value]


def text_or_texts(value: Any, key: Key) -> str | list[str]:
    return texts(value, key) if isinstance(value, list) else text(value, key)


def switch_or_text(value: Any, key: Key) -> bool | str:
    """A switch, or a word some tools put there instead (Axolotl's bf16: auto; gradient_checkpointing: offload)."""
    return value if isinstance(value, bool) else text(value, key)


def mapping(value: Any, key: Key) -> dict[str, Any]:
    """A mapping (its keys in `key.fields` typed too; the others kept as they are, for the mapping to list)."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _Wrong("a mapping of keys")
    return dict(value)


def entries(value: Any, key: Key) -> list[dict[str, Any]]:
    """A list of mappings, each typed as `mapping` types one."""
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise _Wrong(f"a list of entries (at most {MAX_ITEMS:,})")
    return [mapping(v, key) for v in value]


def anything(value: Any, key: Key) -> Any:
    """A value the mapping only tests for being set (listed, never computed with)."""
    return value


@dataclass(frozen=True)
class Key:
    """One key of a foreign format: its kind, the tool's default, and how crosstune reads it."""

    name: str
    kind: Kind
    default: Any = None
    recipe: str | None = None  # the recipe setting of the same meaning and value: the import sets it, exports write it
    bound: Bound | None = None  # a number's bound (default: the recipe setting's, crosstune.bounds.RECIPE)
    ignored: str = ""  # why the key changes no trained number (the import lists it as ignored)
    alias_of: str | None = None  # an older name of another key, read as that key
    fields: Mapping[str, Key] | None = field(default=None, hash=False)  # a mapping's or an entry's own keys

    @property
    def limits(self) -> Bound | None:
        return self.bound or (RECIPE.get(self.recipe) if self.recipe else None)


def table(*keys: Key) -> dict[str, Key]:
    """A format's keys by name, in the order its files list them (an export writes them in this order)."""
    found = {k.name: k for k in keys}
    if len(found) != len(keys):
        raise ValueError(f"a key twice in one table: {[k.name for k in keys if list(found).count(k.name) > 1]}")
    return found


def in_table_order(values: dict[str, Any], keys: Mapping[str, Key]) -> dict[str, Any]:
    """An export's keys in its format's table order; a key the table lacks is a bug of the export (the import could
    not read it back)."""
    unknown = sorted(set(values) - set(keys))
    if unknown:
        raise ValueError(f"an export writes keys its format's table lacks: {unknown}")
    return {k: values[k] for k in keys if k in values}


@dataclass(frozen=True)
class Source:
    """Where a foreign config's values are: its file and the line of each YAML path (for one-line errors)."""

    file: Path
    lines: Mapping[tuple, int]

    def at(self, path: tuple) -> str:
        for n in range(len(path), 0, -1):
            if path[:n] in self.lines:
                return f"{self.file}:{self.lines[path[:n]]}"
        return str(self.file)


def typed_config(raw: dict[str, Any], keys: Mapping[str, Key], source: Source) -> tuple[dict, dict, list[str]]:
    """(the values of the table's keys, typed; every other key as given; the older names read as their key). A key
    set to null or "" counts as not given (the tool's default applies)."""
    typed: dict[str, Any] = {}
    unknown: dict[str, Any] = {}
    renamed: list[str] = []
    for name, value in raw.items():
        if value is None or value == "":
            continue
        key = keys.get(name) if isinstance(name, str) else None
        if key is None:
            unknown[str(name)] = value
            continue
        target = keys[key.alias_of] if key.alias_of else key
        if key.alias_of:
            if key.alias_of in raw and raw[key.alias_of] not in (None, ""):
                raise ForeignValueError(
                    f"{source.at((name,))}: {name} and {key.alias_of} both given: {name} is the "
                    f"older name of {key.alias_of}, keep that one"
                )
            renamed.append(f"{name}: the older name of {key.alias_of}, read as {key.alias_of}")
        try:
            typed[target.name] = _typed(value, target)
        except _Wrong as e:
            raise ForeignValueError(f"{source.at((name,))}: {name}: {_shown(value)} is not {e.expected}") from None
        except _WrongAt as e:
            path = (name, *e.path)
            where = name + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.path)
            raise ForeignValueError(f"{source.at(path)}: {where}: {_shown(e.value)} is not {e.expected}") from None
    return typed, unknown, renamed


class _WrongAt(Exception):
    """A nested value that is not `expected`, at `path` below the key."""

    def __init__(self, path: tuple, value: Any, expected: str):
        super().__init__(expected)
        self.path, self.value, self.expected = path, value, expected


def _typed(value: Any, key: Key) -> Any:
    if key.kind in (mapping, entries) and key.fields:
        return _nested(value, key)
    return key.kind(value, key)


def _nested(value: Any, key: Key) -> Any:
    """A mapping or entries whose own keys are typed, a wrong one located at its path below the key."""
    if key.kind is entries and (not isinstance(value, list) or len(value) > MAX_ITEMS):
        raise _Wrong(f"a list of entries (at most {MAX_ITEMS:,})")
    items = list(enumerate(value)) if key.kind is entries else [(None, value)]
    out = []
    for i, item in items:
        if not isinstance(item, dict) or not all(isinstance(k, str) for k in item):
            raise _WrongAt(() if i is None else (i,), item, "a mapping of keys")
        typed = {}
        for k, v in item.items():
            sub = key.fields.get(k) if key.fields else None
            if sub is None or v is None:
                typed[k] = v
                continue
            at = (*(() if i is None else (i,)), k)
            try:
                typed[k] = _typed(v, sub)
            except _Wrong as e:
                raise _WrongAt(at, v, e.expected) from None
            except _WrongAt as e:  # deeper down (a mapping's own mapping): located at its whole path
                raise _WrongAt((*at, *e.path), e.value, e.expected) from None
        out.append(typed)
    return out if key.kind is entries else out[0]


def _in_bounds(value: float, key: Key, what: str) -> Any:
    b = key.limits
    if b is None:
        return value
    low_ok = value > b.low if b.low_open else value >= b.low
    high_ok = value < b.high if b.high_open else value <= b.high
    if not (low_ok and high_ok):
        raise _Wrong(what + _span(key))
    return value


def _span(key: Key) -> str:
    b = key.limits
    return f" ({b.span()})" if b is not None else ""


def _shown(value: Any) -> str:
    shown = one_line(repr(value))
    return shown if len(shown) <= 60 else shown[:57] + "..."


def foreign_hub_id(key: str, value: str) -> bool:
    """Whether a foreign config's `value` names a hub id (owner/name: the tools read a name that is no folder as one;
    the recipe writes it hf://OWNER/NAME, crosstune.hub's rule). A value of that shape the hub can't have (letters
    that are not ASCII, more than 96 characters: huggingface_hub's rule) is refused by name, never sent on."""
    if hub.is_hub_id(value):
        return True
    if not ID_SHAPE.match(value) or "--" in value:
        return False
    odd = sorted({c for c in value if not (c.isascii() and (c.isalnum() or c in "-_./"))})
    if odd:
        raise ForeignValueError(
            f"{key}: {value!r} is not a hub id: the hub's ids are ASCII letters, digits, '-', '_' "
            f"and '.' (this one has {', '.join(map(repr, odd))})"
        )
    if len(value) > HUB_ID_MAX:
        raise ForeignValueError(
            f"{key}: {value[:40]!r}... is not a hub id: a hub id has at most {HUB_ID_MAX} characters (this one "
            f"{len(value):,})"
        )
    return False
