"""One fuzz case: a command line, the tree it runs in and what it may answer. A command's generator (tests/fuzz/
commands.py) starts from valid inputs (tests/fuzz/world.py) and changes one to three of them (tests/fuzz/
hostile.py), writing each change down (`notes`) for the failure report.

The case's folder: tree/ (the working directory, and everything the command is given), canary/ (outside the tree:
reached only through links the case put in the tree) and world (a link to the shared inputs, ../world from tree/).
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.fuzz import hostile
from tests.fuzz.world import recipe

CANARY_FILES = {
    "secret.txt": "TOKEN private key\n",
    "secret.jsonl": '{"prompt": "TOKEN", "completion": "TOKEN"}\n',
    "secret.yaml": "name: TOKEN\n",
    "folder/inner.txt": "TOKEN\n",
    "folder/summary.json": '{"note": "TOKEN"}\n',
}
# recipe keys a --set may name, and values that are not values
SET_KEYS = [
    "train.max_steps",
    "lora.rank",
    "lora.alpha",
    "data.max_seq_len",
    "train.learning_rate",
    "serve.port",
    "backend.jax.mesh.tp",
    "backend.jax.mesh.fsdp",
    "eval.k",
    "eval.samples",
    "model.size",
    "hardware",
    "name",
    "output_dir",
    "data.sources",
    "train.per_device_batch_size",
    "serve.tensor_parallel_size",
    "train.seed",
    "model",
    "lora.targets",
    "data.packing",
    "eval.temperature",
    "train.kernels.recompute",
    "backend.jax.attention",
    "backend.jax.scan_layers",
    "no.such.key",
    "",
    "train..max_steps",
]
SET_VALUES = ["[[[[", "{a: 1}", "&a [*a]", "!!python/object/apply:os.system [id]", "[" * 10_000, "{}", "[]", "~"]


OUTPUTS = ("user", "link_out_dir", "file", "fifo", "under_a_file")  # what an output path may find in its way


@dataclass
class Case:
    argv: list[str]
    timeout_s: float = 60.0
    codes: frozenset[int] = frozenset({0, 1, 2})
    reply: bytes | None = None  # the fake endpoint's raw answer to every POST (None: a good answer)
    garbage: bool = False  # no request can succeed on `reply`: exit 0 would be garbage counted as an answer
    protected: list[Path] = field(default_factory=list)  # a user's files in the tree that must stay as they are
    env: dict[str, str] = field(default_factory=dict)  # for the command; @CASE@ is the case's folder


@dataclass
class Ctx:
    rng: random.Random
    case_dir: Path
    endpoint: str
    notes: list[str] = field(default_factory=list)
    listed: set[str] = field(default_factory=set)  # canary folders the user named as an output: may be listed

    @property
    def tree(self) -> Path:
        return self.case_dir / "tree"

    @property
    def canary(self) -> Path:
        return self.case_dir / "canary"

    @property
    def world(self) -> Path:
        return self.case_dir / "world"

    def note(self, text: str) -> None:
        self.notes.append(text)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def copy(self, name: str, to: str | None = None) -> Path:
        """world/name copied to tree/(to or name), links kept as links."""
        src, dest = self.world / name, self.tree / (to or name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dest, symlinks=True)
        else:
            shutil.copy(src, dest)
        return dest

    def write_recipe(self, doc: dict | None = None, name: str = "recipe.yaml") -> str:
        (self.tree / name).write_text(yaml.safe_dump(doc or recipe(), sort_keys=False))
        return name

    def user_file(self, rel: str, text: str = "a user's file\n") -> Path:
        """A file of the user's in the tree (the case's `protected`)."""
        path = self.tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def sets(self) -> list[str]:
        """One hostile --set."""
        key = self.rng.choice(SET_KEYS)
        value = self.rng.choice(SET_VALUES) if self.chance(0.3) else hostile.value(self.rng)
        line = self.rng.choice([f"{key}={value}", key, f"={value}"]) if self.chance(0.15) else f"{key}={value}"
        self.note(f"--set {line[:60]!r}")
        return ["--set", line]

    def option(self, flag: str, kind: str = "number") -> list[str]:
        """flag with a hostile value (kind: number or string)."""
        value = hostile.number(self.rng) if kind == "number" else hostile.string(self.rng)
        self.note(f"{flag} {value[:60]!r}")
        return [flag, value]

    def in_tree(self, rel: str, kind: str = "file") -> bool:
        """Whether tree/rel is still a plain `kind` (file or folder) with no link on its way: an earlier change may
        have made it (or a folder above it) a link, a FIFO or nothing, and a change through it would land outside."""
        path, where = self.tree / rel, self.tree
        for part in Path(rel).parts:
            where = where / part
            if where.is_symlink():
                return False
        return path.is_file() if kind == "file" else path.is_dir()

    def content(self, rel: str, kind: str) -> None:
        if self.in_tree(rel):
            self.note(hostile.write_content(self.rng, self.tree / rel, kind))

    def entry(self, rel: str, allowed: list[str] | None = None) -> None:
        if self.in_tree(rel, "file") or self.in_tree(rel, "folder"):
            self.note(f"{rel}: " + hostile.entry(self.rng, self.tree / rel, self.canary, allowed))

    def odd_name(self, rel: str) -> None:
        if self.in_tree(rel, "folder"):
            self.note(hostile.odd_names(self.rng, self.tree / rel))

    def files(self, rel: str) -> list[str]:
        """The plain files under tree/rel (links not followed), relative to the tree."""
        found = []
        for dirpath, _, names in os.walk(self.tree / rel) if self.in_tree(rel, "folder") else ():
            found += [(Path(dirpath) / n).relative_to(self.tree).as_posix() for n in names]
        return sorted(f for f in found if self.in_tree(f)) or [rel]

    def out_path(self, rel: str, allowed: tuple[str, ...] = OUTPUTS) -> list[Path]:
        """Make what is at an output path hostile: a user's folder, a link to the canaries, a file, a FIFO, under a
        file; the user's files to keep."""
        how = self.rng.choice(allowed)
        path = self.tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if how == "under_a_file" and (path.parent == self.tree or any(path.parent.iterdir())):
            how = "file"  # its folder holds the case's other inputs
        self.note(f"{rel} (the output) is {how}")
        if how == "under_a_file":  # the folder it goes in is a user's file
            path.parent.rmdir()
            return [self.user_file(str(Path(rel).parent))]
        if how == "user":
            return [self.user_file(f"{rel}/{self.rng.choice(['notes.txt', 'summary.json', 'config.json'])}")]
        if how == "file":
            return [self.user_file(rel)]
        hostile.entry(self.rng, path, self.canary, [how])
        if how == "link_out_dir":  # the user named it: listing it to refuse what it holds is no leak
            self.listed.add("folder")
        return []

    def mutate(self, mutations: list, at_least: int = 1, at_most: int = 2) -> list[str]:
        """Apply `at_least`..`at_most` of the mutations (callables returning extra argv, or None), in order."""
        k = self.rng.randint(at_least, min(at_most, len(mutations)))
        picked = sorted(self.rng.sample(range(len(mutations)), k))
        argv: list[str] = []
        for i in picked:
            argv += mutations[i]() or []
        return argv


STREAM_GARBAGE = [
    b'data: {"choices": 5}\n\n',
    b'data: {"choices": [{"text": 5}]}\n\n',
    b'data: {"usage": "x", "choices": []}\n\n',
    b'data: {"choices": [{"text": "x"}], "usage": {"completion_tokens": ' + hostile.HUGE.encode() + b"}}\n\n",
    b"data: {oops\n\n",
    b"data: \xff\xfe\n\n",
    b"data: " + b"[" * 10_000 + b"\n\n",
    b"event: x\n\n",
    b"data: null\n\n",
    b'data: {"error": {"message": "boom"}}\n\n',
    b'data: {"choices": [{"text": "x"}], "usage": {"completion_tokens": NaN, "prompt_tokens": -5}}\n\n',
    b"",
    b'{"choices": [{"text": "x"}]}',
    b'data: {"choices": [{"text": "x", "finish_reason": 7}]}\n\n',
]
BODY_GARBAGE = [
    b'{"choices": 5}',
    b'{"choices": [{"message": {"content": 5}}]}',
    b'{"choices": [{"text": null}]}',
    b"{oops",
    b"\xff\xfe",
    b"[" * 10_000,
    b"[]",
    b"null",
    b'{"error": {"message": "boom"}}',
    b"",
    b'{"choices": [{}]}',
]


# odd but not garbage: one 8 MB answer (its length is the model's business; it must not take the command down)
_HUGE = b"x" * (8 << 20)
HUGE_ANSWERS = {
    True: b'data: {"choices": [{"text": "' + _HUGE + b'"}]}\n\n',
    False: b'{"choices": [{"message": {"content": "' + _HUGE + b'"}, "text": "x"}]}',
}


def garbage(rng: random.Random, stream: bool) -> tuple[bytes, bool]:
    """(a reply, whether it is garbage: no request can succeed on it)."""
    if rng.random() < 0.1:
        return HUGE_ANSWERS[stream], False
    reply = rng.choice(STREAM_GARBAGE if stream else BODY_GARBAGE)
    return reply + (b"data: [DONE]\n\n" if stream and rng.random() < 0.5 else b""), True
