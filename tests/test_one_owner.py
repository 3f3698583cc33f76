"""One owner per fact (issue 38): each fact below is imported from its one module, and a scan of src/crosstune finds
no second definition of it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from tests.helpers.paths import REPO

SRC = REPO / "src" / "crosstune"


def _sources(root: Path = SRC) -> list[tuple[str, ast.Module]]:
    return [
        (p.relative_to(root).as_posix(), ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(root.rglob("*.py"))
    ]


def _strings(node: ast.AST) -> list[object] | None:
    """The constants of a tuple/list/set literal (or a dict literal's keys) of constants only; else None."""
    items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
    if not isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict) or not items:
        return None
    if not all(isinstance(i, ast.Constant) for i in items):
        return None
    return [i.value for i in items]


def backend_name_lists(root: Path = SRC) -> list[str]:
    """file:line of every list of the backend names: a `Literal[...]` naming them, or a module- or class-level
    name bound to a literal collection of exactly them (a tuple, list, set or a dict's keys)."""
    names = {"torch", "jax"}
    found = []
    for rel, tree in _sources(root):
        for node in ast.walk(tree):
            literal = (
                getattr(node.value, "id", getattr(node.value, "attr", "")) if isinstance(node, ast.Subscript) else ""
            )
            if literal == "Literal":
                values = _strings(node.slice) or ([node.slice.value] if isinstance(node.slice, ast.Constant) else [])
                if names <= set(values):
                    found.append(f"{rel}:{node.lineno}")
        for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
            for stmt in scope.body:
                value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
                if value is not None and set(_strings(value) or ()) == names:
                    found.append(f"{rel}:{stmt.lineno}")
    return found


def test_the_backend_names_are_defined_once():
    """crosstune.recipe.schema (the lowest layer that needs them) names the backends; the registry, run.json's and
    bundle.json's schemas and --resume's rule derive from it."""
    from crosstune.recipe.schema import BACKEND_NAMES, BackendName, BackendSection
    from crosstune.run.records import RunRecord
    from crosstune.train.backend import BACKENDS

    assert BACKEND_NAMES == get_args(BackendName) == ("torch", "jax")
    assert tuple(BACKENDS) == BACKEND_NAMES
    assert BackendSection.model_fields["default"].annotation is BackendName
    assert RunRecord.model_fields["backend"].annotation is BackendName
    schema = (SRC / "recipe" / "schema.py").read_text(encoding="utf-8").splitlines()
    line = schema.index('BackendName = Literal["torch", "jax"]') + 1
    assert backend_name_lists() == [f"recipe/schema.py:{line}"]


def test_the_backend_names_scan_finds_a_second_list(tmp_path):
    (tmp_path / "a.py").write_text('from typing import Literal\nX: Literal["jax", "torch"]\n')
    (tmp_path / "b.py").write_text('NAMES = ("torch", "jax")\nOTHER = {"torch": 1, "jax": 2}\n')
    (tmp_path / "d.py").write_text(
        'for s in ("torch", "jax"):\n    side = {"torch": 1, "jax": 2}[s]\n'
    )  # data, not a list
    (tmp_path / "c.py").write_text('class C:\n    kinds = ["jax", "torch"]\n')
    assert backend_name_lists(tmp_path) == ["a.py:2", "b.py:1", "b.py:2", "c.py:2"]
