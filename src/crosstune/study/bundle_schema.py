"""The one schema of a study bundle's manifest (bundle.json), checked on every read: by `study` (which resumes from
it) and by `report` (which reads the runs, evaluations and sweeps it lists). crosstune.study writes it; the schema
lives here, below both readers.

A manifest of the wrong shape is a BundleError naming bundle.json and the field (`stages.train.outputs[0].path`),
never a traceback deep in a reader. Every path it holds is relative to the bundle and stays inside it: absolute
paths, `..`, a link out, or a folder inside another bundle are refused, so no reader hashes or reports a file
outside the bundle it was given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from crosstune.confinement import leads_out, relative_name
from crosstune.errors import InputError
from crosstune.recipe.schema import BACKEND_NAMES
from crosstune.untrusted_files import UnreadableFile, parse_json

BUNDLE_MANIFEST = "bundle.json"
BUNDLE_KIND = "crosstune-study"
STAGE_STATES = ("done", "skipped", "running", "failed", "interrupted", "stale")
CONTENT_KEYS = ("runs", "evals", "sweeps")
FIX = "restore bundle.json from a copy, or move the bundle aside and rerun the study into a new --out"


class BundleError(InputError):
    """A bundle.json that is not a study's manifest; the message names the file and the field."""


class _Bad(Exception):
    def __init__(self, field: str, problem: str):
        super().__init__(field, problem)
        self.field, self.problem = field, problem


KINDS = {type(None): "null", dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
         float: "a number"}  # fmt: skip


def _kind(value: Any) -> str:
    return KINDS.get(type(value), type(value).__name__)


def _need(field: str, value: Any, types: tuple[type, ...], what: str) -> Any:
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise _Bad(field, f"must be {what}, not {_kind(value)}")
    return value


def _str(field: str, value: Any) -> str:
    return _need(field, value, (str,), "a string")


def _int(field: str, value: Any) -> int:
    return _need(field, value, (int,), "an integer")


def _number(field: str, value: Any) -> float:
    return _need(field, value, (int, float), "a number")


def _dict(field: str, value: Any) -> dict:
    return _need(field, value, (dict,), "an object")


def _one_of(choices: tuple[str, ...]) -> Callable[[str, Any], str]:
    def check(field: str, value: Any) -> str:
        if _str(field, value) not in choices:
            raise _Bad(field, f"{value!r} is not one of {', '.join(choices)}")
        return value

    return check


def _list_of(item: Callable[[str, Any], Any]) -> Callable[[str, Any], list]:
    def check(field: str, value: Any) -> list:
        for i, x in enumerate(_need(field, value, (list,), "a list")):
            item(f"{field}[{i}]", x)
        return value

    return check


def _dict_of(item: Callable[[str, Any], Any]) -> Callable[[str, Any], dict]:
    def check(field: str, value: Any) -> dict:
        for k, x in _dict(field, value).items():
            item(f"{field}.{k}", x)
        return value

    return check


def _inside(bundle: Path) -> Callable[[str, Any], str]:
    """A path relative to the bundle that stays in it: not absolute, no `..`, no link out, not in a nested bundle."""
    root = bundle.resolve()

    def check(field: str, value: Any) -> str:
        if relative_name(_str(field, value)) is None:
            raise _Bad(field, f"{value!r} is not a path inside the bundle (relative, without '..')")
        where = (root / value).resolve()
        if leads_out(root, value):  # crosstune.confinement: the one rule of a path under a root
            raise _Bad(field, f"{value!r} leads out of the bundle (to {where})")
        for folder in [where, *where.parents][: len(where.relative_to(root).parts)]:
            if (folder / BUNDLE_MANIFEST).exists():
                raise _Bad(field, f"{value!r} is inside another bundle ({folder})")
        return value

    return check


def _fields(spec: dict[str, tuple[bool, Callable[[str, Any], Any]]]) -> Callable[[str, Any], dict]:
    """An object whose keys in `spec` are (required, check); other keys are left to later formats."""

    def check(field: str, value: Any) -> dict:
        _dict(field, value)
        for key, (required, item) in spec.items():
            where = f"{field}.{key}" if field else key
            if key in value:
                item(where, value[key])
            elif required:
                raise _Bad(where, "is missing")
        return value

    return check


def _schema(bundle: Path) -> Callable[[str, Any], dict]:
    path = _inside(bundle)
    contents = _fields({key: (False, _list_of(path)) for key in CONTENT_KEYS})
    output = _fields({"path": (True, path), "sha256": (True, _str), "skip": (False, _list_of(_str))})
    stage = _fields({
        "status": (True, _one_of(STAGE_STATES)), "was": (False, _one_of(STAGE_STATES)),
        "inputs": (False, _str), "inputs_format": (False, _int), "host": (False, _str), "pid": (False, _int),
        "started": (False, _str), "seconds": (False, _number), "note": (False, _str), "stale": (False, _str),
        "error": (False, _str), "outputs": (False, _list_of(output)), "record": (False, _dict),
        "contents": (False, contents), "wrote": (False, _list_of(path)),
    })  # fmt: skip
    recipe = _fields({"name": (True, _str), "hash": (False, _str), "source": (False, _str),
                      "resolved": (False, path), "overrides": (False, _list_of(_str))})  # fmt: skip
    return _fields({
        "format": (True, _int), "recipe": (True, recipe), "backend": (True, _one_of(BACKEND_NAMES)),
        "created": (False, _str), "hosts": (True, _dict_of(_dict)), "stages": (True, _dict_of(stage)),
        "contents": (True, contents), "data": (False, _dict), "with": (False, _list_of(_str)),
    })  # fmt: skip


def check_manifest(data: Any, path: Path, bundle: Path | None = None, fix: str = FIX) -> dict[str, Any]:
    """`data`, read from `path` (BUNDLE/bundle.json, or a bucket's copy of it), when it is a study's manifest whose
    paths stay inside `bundle` (default: the manifest's folder); else a BundleError naming the file, the first field
    that is wrong and `fix`."""
    if not isinstance(data, dict) or data.get("kind") != BUNDLE_KIND:
        what = "give the bundle's folder" if fix is FIX else fix
        raise BundleError(f"{path}: not a study bundle's manifest (kind {BUNDLE_KIND!r}): {what}")
    try:
        return _schema(Path(path).parent if bundle is None else Path(bundle))("", data)
    except _Bad as bad:
        raise BundleError(f"{path}: {bad.field} {bad.problem}: {fix}") from None


def parse_manifest(text: str | bytes, path: Path | str, bundle: Path, fix: str = FIX) -> dict[str, Any]:
    """A manifest's text, read from `path`, checked as check_manifest checks it: the one parser of bundle.json."""
    try:
        data = parse_json(text, path)
    except UnreadableFile as e:
        raise BundleError(f"{e}: {fix}") from None
    return check_manifest(data, path, bundle, fix)


def read_bundle_manifest(bundle: Path) -> dict[str, Any] | None:
    """BUNDLE/bundle.json checked against the schema; None when there is no such file."""
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
