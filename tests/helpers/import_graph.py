"""The import graph of a source tree, read with `ast` (every import counts: module level, inside a function, under
TYPE_CHECKING), for tests/test_layering.py's checks of src/crosstune and of tests/ itself."""

from __future__ import annotations

import ast
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names) of every import in the file (relative ones resolved), lazy ones included."""
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the package
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.append((node.lineno, base, [a.name for a in node.names]))
    return found


def modules(root: Path, package: str = "crosstune") -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}


def package_imports(path: Path, root: Path, package: str = "crosstune") -> list[tuple[int, str]]:
    """(line, imported module of `package`) of every such import in the file; `from pkg import submodule` counts
    as importing the submodule."""
    known = modules(root, package)
    out = []
    for line, base, names in imports_of(path, root):
        if not (base == package or base.startswith(package + ".")):
            continue
        subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in known]
        out += [(line, m) for m in subs] or [(line, base)]
    return out


def import_graph(root: Path, depth: int | None = None) -> dict[str, set[str]]:
    """{module: the crosstune modules it imports}; `depth` collapses names to their first parts (folders)."""
    cut = (lambda m: ".".join(m.split(".")[:depth])) if depth else (lambda m: m)
    graph: dict[str, set[str]] = {}
    for me, path in modules(root).items():
        for _, target in package_imports(path, root):
            if cut(target) != cut(me):
                graph.setdefault(cut(me), set()).add(cut(target))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found
