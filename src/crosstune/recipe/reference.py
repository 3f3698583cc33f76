"""The recipe schema as a reference a user reads (`crosstune recipe schema`): every key by its YAML path, with its
type, its default, its bound (crosstune.bounds.RECIPE) and the description the schema gives it. Read off the pydantic
models themselves, so it is never out of date."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from crosstune.bounds import RECIPE
from crosstune.recipe.schema import Recipe


@dataclass(frozen=True)
class Key:
    path: str  # YAML path: train.learning_rate, data.sources[].path
    kind: str  # the values it takes: int, float, str, true | false, one of the listed names, a list of them
    default: str  # "required" when the recipe must give it
    about: str  # the schema's description, else what its bound counts ("" when neither)


def keys(section: str | None = None) -> list[Key]:
    """Every key of the recipe (or of one top-level `section`), in the schema's order."""
    found = list(_walk(Recipe, ""))
    return [k for k in found if section is None or k.path == section or k.path.startswith(f"{section}.")]


def sections() -> list[str]:
    return list(Recipe.model_fields)


def _walk(model: type[BaseModel], prefix: str) -> typing.Iterator[Key]:
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        nested, listed = _model_in(field.annotation)
        if nested is not None:
            yield from _walk(nested, f"{path}[]." if listed else f"{path}.")
            continue
        bound = RECIPE.get(path) or RECIPE.get(f"{path}[]")
        about = field.description or (bound.what if bound else "")
        if bound is not None:
            about = f"{about}; {bound.span().split(': ', 1)[1]}" if about != bound.what else bound.span()
        yield Key(path, _kind(field.annotation), _default(field), about)


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The section model a field holds (itself, optional or a list of them) and whether it is a list."""
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg, False
        if typing.get_origin(arg) is list:
            inner = typing.get_args(arg)[0]
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner, True
    return None, False


def _kind(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _kind(args[0])
    if origin is typing.Literal:
        return " | ".join(map(str, args))
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _kind(a) for a in args)
    if origin in (list, tuple):
        return f"list of {_kind(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    if annotation is bool:
        return "true | false"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        return "" if isinstance(value, BaseModel) else _shown(value)
    if field.default is PydanticUndefined:
        return "required"
    return _shown(field.default)


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return str(value)
