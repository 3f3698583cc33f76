"""The tests' own structure: no module under tests/ imports a test module (what tests share lives in tests/helpers/ or
a conftest.py), one `free_port` (tests/helpers/ports.py) and one fake HTTP server (tests/helpers/fake_openai.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.import_graph import imports_of, module_name
from tests.helpers.paths import REPO

TESTS = REPO / "tests"
HTTP_BASES = {"BaseHTTPRequestHandler", "HTTPServer", "ThreadingHTTPServer"}


def is_test_module(module: str) -> bool:
    return module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_")


def imports_of_test_modules(root: Path = REPO) -> list[str]:
    """file:line: importer imports a test module, for every .py file under root/tests."""
    found = []
    for path in sorted((root / "tests").rglob("*.py")):
        for line, base, names in imports_of(path, root):
            targets = [base, *(f"{base}.{name}" for name in names)]
            found += [f"{path.relative_to(root)}:{line}: imports {t}" for t in targets if is_test_module(t)]
    return found


def definitions(root: Path = REPO) -> dict[str, list[str]]:
    """{"free_port": modules defining it, "http server": modules defining an HTTP server or handler class}."""
    found: dict[str, list[str]] = {"free_port": [], "http server": []}
    for path in sorted((root / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name == "free_port":
                found["free_port"].append(module_name(path, root))
            bases = {getattr(b, "id", getattr(b, "attr", None)) for b in getattr(node, "bases", [])}
            if isinstance(node, ast.ClassDef) and bases & HTTP_BASES:
                found["http server"].append(module_name(path, root))
    return {kind: sorted(set(modules)) for kind, modules in found.items()}


def test_no_test_module_imports_another():
    assert imports_of_test_modules() == []


def test_one_free_port_and_one_fake_server():
    assert definitions() == {"free_port": ["tests.helpers.ports"], "http server": ["tests.helpers.fake_openai"]}


def test_the_checks_catch_what_they_look_for(tmp_path):
    (tmp_path / "tests" / "evals").mkdir(parents=True)
    (tmp_path / "tests" / "evals" / "test_a.py").write_text("def f():\n    from tests.evals.test_b import g\n")
    (tmp_path / "tests" / "evals" / "test_c.py").write_text(
        "from tests.evals import test_b\nfrom tests import helpers\n"
    )
    (tmp_path / "tests" / "evals" / "test_b.py").write_text(
        "from http.server import BaseHTTPRequestHandler\n\n\nclass H(BaseHTTPRequestHandler):\n    pass\n\n\n"
        "def free_port():\n    return 0\n"
    )
    assert imports_of_test_modules(tmp_path) == [
        "tests/evals/test_a.py:2: imports tests.evals.test_b",
        "tests/evals/test_c.py:1: imports tests.evals.test_b",
    ]
    assert definitions(tmp_path) == {"free_port": ["tests.evals.test_b"], "http server": ["tests.evals.test_b"]}
