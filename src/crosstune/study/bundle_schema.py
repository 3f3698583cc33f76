"""The one schema of a study bundle's manifest (bundle.json), a pydantic model read on every read: by `study`
(which resumes from it) and by `report` (which reads the runs, evaluations and sweeps it lists). crosstune.study
writes it; the schema lives here, below both readers, with the one rule of whether a recorded stage is current
(`StageEntry.currency`).

A manifest of the wrong shape is a BundleError naming bundle.json and the field (`stages.train.outputs[0].path`),
never a traceback deep in a reader. Every path it holds is relative to the bundle and stays inside it: absolute
paths, `..`, a link out, or a folder inside another bundle are refused, so no reader hashes or reports a file
outside the bundle it was given. Keys the schema does not name are kept as they are (a later format's).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_serializer

from crosstune.confinement import leads_out, relative_name, walk_files
from crosstune.errors import InputError
from crosstune.fsutil import file_sha256
from crosstune.recipe.schema import BackendName
from crosstune.untrusted_files import UnreadableFile, parse_json

BUNDLE_MANIFEST = "bundle.json"
BUNDLE_KIND = "crosstune-study"
StageState = Literal["done", "skipped", "running", "failed", "interrupted", "stale"]
FINISHED = ("done", "skipped")
# What a stage's inputs cover. 2: the files it reads by fingerprint (model, problems), not by path, and the outputs
# of the stages it reads (Stage.reads). A stage recorded under another format is redone, saying why.
INPUTS_FORMAT = 2
FIX = "restore bundle.json from a copy, or move the bundle aside and rerun the study into a new --out"


class BundleError(InputError):
    """A bundle.json that is not a study's manifest; the message names the file and the field."""


def _inside(value: str, info: ValidationInfo) -> str:
    """A path relative to the bundle that stays in it: not absolute, no `..`, no link out, not in a nested bundle.
    Checked when a manifest is read (the context names the bundle), not when the study builds one."""
    root = (info.context or {}).get("bundle")
    if root is None:
        return value
    if relative_name(value) is None:
        raise ValueError(f"{value!r} is not a path inside the bundle (relative, without '..')")
    where = (root / value).resolve()
    if leads_out(root, value):  # crosstune.confinement: the one rule of a path under a root
        raise ValueError(f"{value!r} leads out of the bundle (to {where})")
    for folder in [where, *where.parents][: len(where.relative_to(root).parts)]:
        if (folder / BUNDLE_MANIFEST).exists():
            raise ValueError(f"{value!r} is inside another bundle ({folder})")
    return value


BundlePath = Annotated[str, AfterValidator(_inside)]


class _Part(BaseModel):
    """A part of the manifest: strict types, other keys kept, a field that is None left out of the file."""

    model_config = ConfigDict(strict=True, extra="allow", populate_by_name=True)

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        data = handler(self)
        for name, info in type(self).model_fields.items():
            if getattr(self, name) is None:
                data.pop(name, None)
                data.pop(info.alias, None)
        return data


class Contents(_Part):
    """What the report reads from the bundle: bundle-relative folders."""

    runs: list[BundlePath] = Field(default_factory=list)
    evals: list[BundlePath] = Field(default_factory=list)
    sweeps: list[BundlePath] = Field(default_factory=list)


CONTENT_KEYS = tuple(Contents.model_fields)


class OutputRecord(_Part):
    """One output of a finished stage: a file or folder inside the bundle and its sha256 (`tree_sha256`)."""

    path: BundlePath
    sha256: str
    skip: list[str] | None = None  # names under it that change without changing the output (locks, caches)

    def changed(self, bundle: Path) -> str | None:
        """None when the output is there with its recorded hash; otherwise why not."""
        where = bundle / self.path
        if not where.exists():
            return f"{self.path} is missing"
        if tree_sha256(where, tuple(self.skip or ())) != self.sha256:
            return f"{self.path} changed since the stage wrote it (sha256 differs)"
        return None


@dataclass(frozen=True)
class Currency:
    """What a rerun does with a recorded stage: `keep` it (up to date), `redo` it (its folders cleared first) or
    `resume` it in place (an earlier run stopped in it); `why`, said on the stage's line."""

    action: Literal["keep", "redo", "resume"]
    why: str


class StageEntry(_Part):
    status: StageState
    was: StageState | None = None  # the status a stale stage had before it was marked
    inputs: str | None = None  # fingerprint of what the stage read (runner.stage_inputs)
    inputs_format: int | None = None
    host: str | None = None
    pid: int | None = None  # while running
    started: str | None = None
    seconds: float | None = None
    note: str | None = None
    stale: str | None = None  # why it is stale
    error: str | None = None
    outputs: list[OutputRecord] | None = None
    record: dict[str, Any] | None = None  # the stage's own facts (engine, command, ...)
    contents: Contents | None = None
    wrote: list[BundlePath] | None = None  # every file under its folders: what a redo may remove

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def changed_output(self, bundle: Path) -> str | None:
        """None when every recorded output is there with its recorded hash; otherwise the first that isn't, and why."""
        return next((why for out in self.outputs or [] if (why := out.changed(bundle)) is not None), None)

    def currency(self, inputs: str, bundle: Path) -> Currency:
        """Whether this stage, recorded in `bundle`, is up to date for a run whose inputs fingerprint to `inputs`:
        kept when it finished with these inputs and its outputs still hash as recorded; redone when it is stale,
        its inputs changed or an output did; resumed in place when an earlier run stopped in it."""
        if self.status == "stale":
            return Currency("redo", f"stale ({self.stale}): redoing it")
        if self.inputs != inputs:
            older = ""
            if self.inputs_format != INPUTS_FORMAT:
                older = " (recorded by an older crosstune, whose inputs did not fingerprint the files a stage reads)"
            return Currency("redo", f"its inputs changed since it ran{older}: redoing it")
        if not self.finished:
            return Currency("resume", f"continuing where an earlier run stopped ({self.status})")
        if (problem := self.changed_output(bundle)) is not None:
            return Currency("redo", f"redoing it: {problem}")
        return Currency("keep", "up to date" if self.status == "done" else "skipped before, nothing changed")


class RecipeRef(_Part):
    """The recipe the study runs: its name (a bundle holds one recipe's study), hash, file and overrides."""

    name: str
    hash: str | None = None
    source: str | None = None
    resolved: BundlePath | None = None
    overrides: list[str] | None = None


class BundleManifest(_Part):
    format: int
    kind: Literal["crosstune-study"] = BUNDLE_KIND
    recipe: RecipeRef
    backend: BackendName
    created: str | None = None
    hosts: dict[str, dict[str, Any]]  # hostname -> study.machine's description
    stages: dict[str, StageEntry]
    contents: Contents
    data: dict[str, Any] | None = None  # the prepared data's hashes
    with_: list[str] | None = Field(None, alias="with")  # the optional stages asked for

    def status_of(self, stage: str) -> str | None:
        entry = self.stages.get(stage)
        return None if entry is None else entry.status


def tree_sha256(path: Path, skip: tuple[str, ...] = ()) -> str:
    """One sha256 over every file under `path` (relative names and contents; names in `skip` left out). Links are
    not followed (crosstune.confinement.walk_files): a link, or a folder that is one, adds nothing."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(path)
    single = path.is_file() and not path.is_symlink()
    files = [(path.name, path)] if single else sorted(walk_files(path), key=lambda named: Path(named[0]).parts)
    h = hashlib.sha256()
    for rel, f in files:
        if any(part in skip for part in Path(rel).parts):
            continue
        h.update(rel.encode() + b"\0" + file_sha256(f).encode() + b"\n")
    return h.hexdigest()


_TYPES = {"dict_type": "an object", "model_type": "an object", "list_type": "a list", "string_type": "a string",
          "int_type": "an integer", "float_type": "a number", "bool_type": "a boolean"}  # fmt: skip
_KINDS = {type(None): "null", dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
          float: "a number"}  # fmt: skip


def _field(loc: tuple) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")


def _problem(error: dict) -> str:
    """A pydantic error as the manifest's one-line refusal says it."""
    kind, value = error["type"], error.get("input")
    shown = _KINDS.get(type(value), type(value).__name__)
    if kind == "missing":
        return "is missing"
    if kind == "literal_error" and isinstance(value, str):
        return f"{value!r} is not one of {error['ctx']['expected'].replace(chr(39), '').replace(' or ', ', ')}"
    if kind == "literal_error":
        return f"must be a string, not {shown}"
    if kind in _TYPES:
        return f"must be {_TYPES[kind]}, not {shown}"
    if kind == "value_error":
        return str(error["ctx"]["error"])
    return error["msg"]


def check_manifest(data: Any, path: Path, bundle: Path | None = None, fix: str = FIX) -> BundleManifest:
    """`data`, read from `path` (BUNDLE/bundle.json, or a bucket's copy of it), as the manifest when it is a study's
    whose paths stay inside `bundle` (default: the manifest's folder); else a BundleError naming the file, the first
    field that is wrong and `fix`."""
    if not isinstance(data, dict) or data.get("kind") != BUNDLE_KIND:
        what = "give the bundle's folder" if fix is FIX else fix
        raise BundleError(f"{path}: not a study bundle's manifest (kind {BUNDLE_KIND!r}): {what}")
    root = (Path(path).parent if bundle is None else Path(bundle)).resolve()
    try:
        return BundleManifest.model_validate(data, context={"bundle": root})
    except ValidationError as e:
        first = e.errors()[0]
        raise BundleError(f"{path}: {_field(first['loc'])} {_problem(first)}: {fix}") from None


def parse_manifest(text: str | bytes, path: Path | str, bundle: Path, fix: str = FIX) -> BundleManifest:
    """A manifest's text, read from `path`, checked as check_manifest checks it: the one parser of bundle.json."""
    try:
        data = parse_json(text, path)
    except UnreadableFile as e:
        raise BundleError(f"{e}: {fix}") from None
    return check_manifest(data, path, bundle, fix)


def read_bundle_manifest(bundle: Path) -> BundleManifest | None:
    """BUNDLE/bundle.json read into the schema; None when there is no such file."""
    path = Path(bundle) / BUNDLE_MANIFEST
    if leads_out(bundle, BUNDLE_MANIFEST):
        raise BundleError(f"{path} leads out of the bundle {Path(bundle).resolve()} (to {path.resolve()}): {FIX}")
    if not path.is_file():
        return None
    try:
        text = path.read_bytes()
    except OSError as e:
        raise BundleError(f"{path}: unreadable ({e}): {FIX}") from None
    return parse_manifest(text, path, Path(bundle))
