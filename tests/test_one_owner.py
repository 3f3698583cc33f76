"""One owner per fact (issue 38): each fact below is imported from its one module, and a scan of src/crosstune finds
no second definition of it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import get_args

from crosstune.hardware import HARDWARE
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


UNIT_FACTORS = {10**9, 2**30, 2**20}  # GB, GiB, MiB in bytes
UNIT_NAMES = {"GB", "GIB", "MIB", "GiB", "MiB"}


def _number(node: ast.AST) -> float | None:
    """The value of a number written with constants, * and ** only (1e9, 2**30, 1024 * 1024); else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow | ast.Mult):
        left, right = _number(node.left), _number(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Mult):
            return left * right
        return left**right if abs(right) < 100 else None  # no giant powers
    return None


def memory_unit_definitions(root: Path = SRC) -> list[str]:
    """file:line of a memory unit defined or written out outside crosstune.units: a name GB/GIB/MIB bound at module
    level, or a factor of 10^9, 2^30 or 2^20 bytes written as a number (1e9, 10**9, 1024**3, 2**20, 1024 * 1024)."""
    found = []
    for rel, tree in _sources(root):
        if rel == "units.py":
            continue
        for stmt in tree.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
            if any(getattr(t, "id", None) in UNIT_NAMES for t in targets):
                found.append(f"{rel}:{stmt.lineno}")
        for node in ast.walk(tree):
            value = _number(node)
            if value in UNIT_FACTORS:
                found.append(f"{rel}:{node.lineno}")
    return sorted(set(found))


def test_the_memory_units_are_defined_once():
    """crosstune.units owns GB (10^9: chips' HBM, the planner) and GiB (2^30: what runs measure, vLLM): no module
    defines a unit again or writes a factor inline (serve's engine once compared `hbm_gb * 1e9` with `70 * 1024**3`);
    the planner, the serve plan and the metrics import them."""
    from crosstune.planner import compiled, estimate
    from crosstune.serve import capacity, engine
    from crosstune.units import GB, GIB, gb_to_gib

    assert (GB, GIB) == (10**9, 2**30) and gb_to_gib(1) == 10**9 / 2**30
    assert estimate.GB is compiled.GB is GB and capacity.GIB is GIB
    assert memory_unit_definitions() == []
    h100 = dataclasses.replace(HARDWARE["1xh100"].chip, hbm_gb=80.0)  # 74.5 GiB: vLLM's "big GPU" (>= 70 GiB)
    assert engine.default_batched_tokens(dataclasses.replace(HARDWARE["1xh100"], chip=h100)) == 8192
    small = dataclasses.replace(h100, hbm_gb=74.0)  # 68.9 GiB: not big, though 74 > 70
    assert engine.default_batched_tokens(dataclasses.replace(HARDWARE["1xh100"], chip=small)) == 2048


def test_the_memory_unit_scan_finds_inline_factors(tmp_path):
    (tmp_path / "a.py").write_text("GIB = 1024**3\nx = 5 * 1e9\ny = 2 ** 20\nz = 1024 * 1024\nok = 2**10 * 3\n")
    assert memory_unit_definitions(tmp_path) == ["a.py:1", "a.py:2", "a.py:3", "a.py:4"]
