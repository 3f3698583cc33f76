"""A recipe's problems (YAML path, line, hint) and the error that carries all of them: shared by loading and the
consistency checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crosstune.errors import CrosstuneError


@dataclass(frozen=True)
class Problem:
    path: str  # dotted YAML path, e.g. "lora.rank" or "data.sources[0].path"
    message: str
    hint: str = ""
    line: int | None = None
    severity: str = "error"  # "error" | "warning"

    def render(self, file: str | Path | None = None) -> str:
        where = f"{file}:{self.line}" if file and self.line else (str(file) if file else "")
        head = f"{where}: " if where else ""
        hint = f"  (hint: {self.hint})" if self.hint else ""
        return f"{head}{self.severity} at {self.path or '<root>'}: {self.message}{hint}"


class RecipeError(CrosstuneError):
    """Raised with every problem found, so a user fixes a recipe in one pass."""

    def __init__(self, file: str | Path | None, problems: list[Problem]):
        self.file, self.problems = file, problems
        super().__init__("\n".join(p.render(file) for p in problems))

    @property
    def lines(self) -> list[str]:
        return [p.render(self.file) for p in self.problems]  # a problem a line, each kept one by the handler
