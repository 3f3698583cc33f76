"""A conversion under way: the recipe built so far (`Port`), what did not carry over (`Unmapped`: one line each, the
key, why, the nearest crosstune setting), and the user's config read through its format's key table (`Keys`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crosstune.errors import CrosstuneError
from crosstune.recipe.porting.typed import Key, Source, typed_config

TOOL_KEYS = {"axolotl": "an Axolotl key", "trl": "a TRL key", "llamafactory": "a LLaMA-Factory key"}
LOGGING_PREFIXES = ("wandb_", "mlflow_", "comet_", "swanlab_", "trackio_")


class ImportRefused(CrosstuneError):
    """A config crosstune can't train as written: another model, a full fine-tune, no readable data, LoRA targets
    that match no module; the message names the key."""


@dataclass(frozen=True)
class Unmapped:
    """A key of the user's config without a crosstune equivalent (or ignored: it changes no trained number)."""

    key: str
    reason: str
    nearest: str = ""
    ignored: bool = False

    def render(self) -> str:
        head = "ignored" if self.ignored else "not mapped"
        tail = f" (nearest: {self.nearest})" if self.nearest else ""
        return f"{head}: {self.key}: {self.reason}{tail}"


@dataclass
class Port:
    """A conversion under way: the recipe (nested dicts) built so far, what did not carry over, and notes on what
    carried over with an assumption."""

    source: Path
    tool: str
    recipe: dict[str, Any] = field(default_factory=dict)
    unmapped: list[Unmapped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def set(self, path: str, value: Any) -> None:
        node = self.recipe
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    def get(self, path: str, default: Any = None) -> Any:
        node: Any = self.recipe
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def miss(self, key: str, reason: str, nearest: str = "") -> None:
        self.unmapped.append(Unmapped(key, reason, nearest))

    def ignore(self, key: str, reason: str) -> None:
        self.unmapped.append(Unmapped(key, reason, ignored=True))

    @property
    def differences(self) -> list[Unmapped]:
        """The unmapped keys that change what is trained or how (ignored ones don't)."""
        return [u for u in self.unmapped if not u.ignored]


class Keys:
    """A config read through its format's table: typed values (crosstune.recipe.porting.typed), the tool's default
    under each key the file leaves out, and which keys the mapping read. Reading a key the table lacks is a bug of
    the mapping (KeyError): every key an import reads is declared, with its type, in its format's one table."""

    def __init__(self, cfg: dict[str, Any], keys: Mapping[str, Key], source: Source):
        self.table = keys
        self.given, self.unknown, self.renamed = typed_config(cfg, keys, source)
        self.nulls = {k for k, v in cfg.items() if v is None}
        self.used: set[str] = set()

    def __call__(self, key: str) -> Any:
        row = self.table[key]
        self.used.add(key)
        return self.given.get(key, row.default)

    def has(self, key: str) -> bool:
        """Whether the file gives `key` (not its default)."""
        return key in self.given

    def null(self, key: str) -> bool:
        """Whether the file sets `key` to null (for a tool that reads null as "none" rather than its default)."""
        self.used.add(key)
        return key in self.nulls

    def direct(self, port: Port) -> None:
        """Every key of the same meaning and value as a recipe setting (the table's `recipe`), the tool's default
        where the file leaves it out: the recipe setting, as the tool would train with it."""
        for row in self.table.values():
            if row.recipe is not None and (value := self(row.name)) is not None:
                port.set(row.recipe, value)

    def rest(self, port: Port) -> None:
        """Every key the mapping did not read: ignored (with why: by the table, or a logging service's prefix) or
        not mapped."""
        port.notes += self.renamed
        for key, value in {**self.given, **self.unknown}.items():
            if key in self.used or value in (False, [], {}):  # a switch left off, an empty list: nothing to map
                continue
            row = self.table.get(key)
            if row is not None and row.ignored:
                port.ignore(key, row.ignored)
            elif key.startswith(LOGGING_PREFIXES):
                port.ignore(key, "an experiment tracker's setting; crosstune writes metrics.jsonl and TensorBoard")
            else:
                port.miss(key, f"{TOOL_KEYS[port.tool]} crosstune's mapping does not carry")
