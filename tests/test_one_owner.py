"""One owner per fact: each fact below is imported from its one module, and a scan of src/crosstune finds
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
    """crosstune.recipe.backend_schema (the lowest layer that needs them) names the backends; the recipe schema
    re-exports them, and the registry, run.json's and bundle.json's schemas and --resume's rule derive from it."""
    from crosstune.recipe.schema import BACKEND_NAMES, BackendName, BackendSection
    from crosstune.run.records import RunRecord
    from crosstune.train.backend import BACKENDS

    assert BACKEND_NAMES == get_args(BackendName) == ("torch", "jax")
    assert tuple(BACKENDS) == BACKEND_NAMES
    assert BackendSection.model_fields["default"].annotation is BackendName
    assert RunRecord.model_fields["backend"].annotation is BackendName
    schema = (SRC / "recipe" / "backend_schema.py").read_text(encoding="utf-8").splitlines()
    line = next(i for i, text in enumerate(schema, 1) if text.startswith('BackendName = Literal["torch", "jax"]'))
    assert backend_name_lists() == [f"recipe/backend_schema.py:{line}"]


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
    from crosstune.planner import aot_report, estimate
    from crosstune.serve import capacity, engine
    from crosstune.units import GB, GIB, gb_to_gib

    assert (GB, GIB) == (10**9, 2**30) and gb_to_gib(1) == 10**9 / 2**30
    assert estimate.GB is aot_report.GB is GB and capacity.GIB is GIB
    assert memory_unit_definitions() == []
    h100 = dataclasses.replace(HARDWARE["1xh100"].chip, hbm_gb=80.0)  # 74.5 GiB: vLLM's "big GPU" (>= 70 GiB)
    assert engine.default_batched_tokens(dataclasses.replace(HARDWARE["1xh100"], chip=h100)) == 8192
    small = dataclasses.replace(h100, hbm_gb=74.0)  # 68.9 GiB: not big, though 74 > 70
    assert engine.default_batched_tokens(dataclasses.replace(HARDWARE["1xh100"], chip=small)) == 2048


def test_the_memory_unit_scan_finds_inline_factors(tmp_path):
    (tmp_path / "a.py").write_text("GIB = 1024**3\nx = 5 * 1e9\ny = 2 ** 20\nz = 1024 * 1024\nok = 2**10 * 3\n")
    assert memory_unit_definitions(tmp_path) == ["a.py:1", "a.py:2", "a.py:3", "a.py:4"]


JSON_PARSERS = {"load", "loads", "read_json", "parse_json"}
OWN_FILES = {  # file -> (the names that point at it, the modules that may parse it)
    "bundle.json": ({"BUNDLE_MANIFEST"}, {"study/bundle_schema.py"}),
    "summary.json": ({"SUMMARY_JSON", "summary_file"}, {"servebench/summary.py", "evals/results.py"}),
}


def json_readers(root: Path = SRC) -> dict[str, list[str]]:
    """{file: ["module:function", ...]} of every function that parses JSON (json.load/loads, read_json, parse_json) and
    names bundle.json or summary.json (the literal, or the constant or helper that holds it)."""
    found: dict[str, list[str]] = {name: [] for name in OWN_FILES}
    for rel, tree in _sources(root):
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            calls = [n.func for n in ast.walk(fn) if isinstance(n, ast.Call)]
            if not any(getattr(f, "attr", getattr(f, "id", None)) in JSON_PARSERS for f in calls):
                continue
            words = {n.value for n in ast.walk(fn) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            words |= {getattr(n, "id", getattr(n, "attr", None)) for n in ast.walk(fn)}
            for name, (aliases, _) in OWN_FILES.items():
                if any(name in w for w in words if isinstance(w, str)) or words & aliases:
                    found[name].append(f"{rel}:{fn.name}")
    return found


def test_bundle_json_and_summary_json_each_have_one_reader():
    """bundle.json is parsed by its schema's module alone (study.bundle_schema: the study, its bucket copy and the
    report all go through it), a sweep's summary.json by servebench.summary and an evaluation's by evals.results:
    no second json.load of either anywhere in src/."""
    found = json_readers()
    for name, (_, owners) in OWN_FILES.items():
        assert {where.split(":")[0] for where in found[name]} <= owners, (name, found[name])
    assert found["bundle.json"] == ["study/bundle_schema.py:parse_manifest"]
    assert sorted(found["summary.json"]) == [
        "evals/results.py:evaluation_at",
        "servebench/summary.py:_parsed",
    ]


def test_the_reader_scan_finds_a_second_reader(tmp_path):
    (tmp_path / "report.py").write_text(
        "import json\n\n\ndef sniff(p):\n    return json.loads((p / 'summary.json').read_text())\n\n\n"
        "def bundle(p):\n    return json.load(open(p / BUNDLE_MANIFEST))\n\n\ndef other(p):\n    return json.loads(p)\n"
    )
    assert json_readers(tmp_path) == {"bundle.json": ["report.py:bundle"], "summary.json": ["report.py:sniff"]}


PARSE_CALLS = {  # module -> its functions that parse text
    "json": {"load", "loads", "JSONDecoder"},
    "yaml": {
        "load",
        "safe_load",
        "full_load",
        "unsafe_load",
        "load_all",
        "safe_load_all",
        "compose",
        "compose_all",
        "parse",
        "SafeLoader",
        "Loader",
        "FullLoader",
        "CLoader",
        "CSafeLoader",
        "BaseLoader",
    },
}
PARSE_MODULES = {"orjson", "ujson", "simplejson", "ruamel", "ruamel.yaml", "json5", "jsonlines"}
PARSERS_ELSEWHERE = {  # module -> why it may parse without crosstune.untrusted_files
    "untrusted_files.py": "the owner",
}


def json_yaml_parsers(root: Path = SRC) -> list[str]:
    """file:line of every place that parses JSON or YAML itself: a call or reference to json.load(s)/JSONDecoder,
    a yaml loader (load, safe_load, compose, a Loader class), or an import of another JSON/YAML parser."""
    found = []
    for rel, tree in _sources(root):
        if rel in PARSERS_ELSEWHERE:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.attr in PARSE_CALLS.get(node.value.id, ()):
                    found.append(f"{rel}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "") in PARSE_CALLS:
                if {a.name for a in node.names} & PARSE_CALLS[node.module or ""]:
                    found.append(f"{rel}:{node.lineno}")
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if any(n.split(".")[0] in PARSE_MODULES for n in names):
                    found.append(f"{rel}:{node.lineno}")
    return sorted(set(found))


def test_no_module_parses_json_or_yaml_but_the_owner():
    """crosstune.untrusted_files parses every JSON, JSONL and YAML text (within its bounds, each refusal
    `FILE:LINE: what`): recipes, --set values, prices, data, samples, manifests, configs read back. json.dumps and
    yaml.safe_dump (writing) are anyone's."""
    assert json_yaml_parsers() == []


def test_the_parser_scan_finds_a_second_parser(tmp_path):
    (tmp_path / "a.py").write_text(
        "import json\nimport yaml\nfrom json import loads\nimport orjson\n\n\ndef f(p):\n"
        "    return json.loads(p), yaml.safe_load(p), yaml.compose(p), json.dumps(p), yaml.safe_dump(p)\n\n\n"
        "class L(yaml.SafeLoader):\n    pass\n"
    )
    (tmp_path / "untrusted_files.py").write_text("import json\nX = json.loads('1')\n")
    assert json_yaml_parsers(tmp_path) == ["a.py:11", "a.py:3", "a.py:4", "a.py:8"]
