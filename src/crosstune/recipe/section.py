"""The base of every recipe section: unknown keys refused, strict types, finite numbers; and the keys added after
recipes were first hashed, left out of a dump while unset."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_serializer
from pydantic_core import PydanticUndefined

from crosstune.bounds import RECIPE


def bounded(path: str, default: Any = PydanticUndefined, **field: Any) -> Any:
    """A pydantic Field of the number at YAML `path`, with its bound from crosstune.bounds.RECIPE (the one table)."""
    b = RECIPE[path]
    low = {"gt": b.low} if b.low_open else {"ge": b.low}
    high = {"lt": b.high} if b.high_open else {"le": b.high}
    return Field(default, **low, **high, **field)


def each(path: str, kind: type) -> Any:
    """The type of one item of a list of numbers at YAML `path`, bounded as `bounded` does."""
    return Annotated[kind, bounded(path)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, strict=True, allow_inf_nan=False)
    # Keys a section gained later (hub ids, message keys): absent from a dump while None, so every earlier recipe,
    # preparation and study keeps its hash (crosstune.recipe.load.recipe_hash, the data hash, a stage's inputs).
    omitted_when_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name in self.omitted_when_none:
                if data.get(name) is None:
                    data.pop(name, None)
        return data
