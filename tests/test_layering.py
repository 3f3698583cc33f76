"""The dependency direction of README's repository map, checked on the import graph of src/crosstune.

Every `import crosstune.…` (at module level or inside a function: a lazy import is still a dependency) must go to
the same layer or a lower one. A new module belongs to the layer of its longest listed prefix; an unlisted one
fails the test, so the map stays complete.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Lowest first. The names are module prefixes (README, "Repository map"); the longest matching prefix decides.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("crosstune", "crosstune.errors", "crosstune.fsutil", "crosstune.hardware", "crosstune.recipes")),
    ("knowledge", ("crosstune.families", "crosstune.synth")),
    ("recipe", ("crosstune.recipe", "crosstune.models")),
    ("data and evaluation", ("crosstune.data", "crosstune.evals")),
    # what a run directory holds and the LoRA formats: read by backends and by the stages after training
    ("run formats", (
        "crosstune.train.metrics", "crosstune.train.integrity", "crosstune.train.rundir", "crosstune.train.plot",
        "crosstune.train.resume",
        "crosstune.export.lora", "crosstune.export.jax_lora", "crosstune.export.shards", "crosstune.export.merge",
        "crosstune.export.output",
    )),
    ("backends and planner", ("crosstune.train", "crosstune.planner", "crosstune.models.pretrain")),
    ("stages", ("crosstune.export", "crosstune.compare", "crosstune.serve")),
    ("entry points", ("crosstune.cli", "crosstune.commands", "crosstune.demo", "crosstune.demo_results",
                      "crosstune.doctor", "crosstune.models.cli", "crosstune.train.cli")),
]  # fmt: skip


def layer_of(module: str) -> int:
    best, rank = "", -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            inside = module == p or (p != "crosstune" and module.startswith(p + "."))  # the root: itself only
            if inside and len(p) > len(best):
                best, rank = p, i
    if rank < 0:
        raise AssertionError(f"{module} is in no layer of tests/test_layering.py: add it (and to README's map)")
    return rank


def module_name(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def crosstune_imports(path: Path, src: Path = SRC) -> list[tuple[int, str]]:
    """(line, imported module) of every crosstune import in the file, lazy ones included."""
    me = module_name(path, src)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the package
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from crosstune import fsutil` imports the submodule crosstune.fsutil
            found += [(node.lineno, f"{base}.{a.name}" if base == "crosstune" else base) for a in node.names]
    return [(line, m) for line, m in found if m == "crosstune" or m.startswith("crosstune.")]


def upward_imports(src: Path = SRC) -> list[str]:
    problems = []
    for path in sorted((src / "crosstune").rglob("*.py")):
        me = module_name(path, src)
        for line, target in crosstune_imports(path, src):
            if layer_of(target) > layer_of(me):
                problems.append(
                    f"{path.relative_to(src)}:{line}: {me} ({LAYERS[layer_of(me)][0]}) imports {target} "
                    f"({LAYERS[layer_of(target)][0]})"
                )
    return problems


def test_no_upward_imports():
    assert upward_imports() == []


def test_an_upward_import_is_caught(tmp_path):
    """The checker itself: a families module importing the training backends is reported with file and line."""
    pkg = tmp_path / "crosstune" / "families"
    pkg.mkdir(parents=True)
    (tmp_path / "crosstune" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "bad.py").write_text("import math\n\n\ndef f():\n    from crosstune.train import jax_model\n")
    assert upward_imports(tmp_path) == [
        "crosstune/families/bad.py:5: crosstune.families.bad (knowledge) imports crosstune.train (backends and planner)"
    ]


def _constants(path: Path) -> list[tuple[int, str]]:
    return [
        (n.lineno, n.value)
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def test_train_has_no_backend_branches_outside_the_registry():
    """`if backend == "torch"` belongs in crosstune.train.backend's registry only: the session and CLI ask the
    backend object, so adding a backend is adding a class."""
    found = []
    for path in sorted((SRC / "crosstune" / "train").glob("*.py")):
        if path.name == "backend.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
                values = [node.left, *node.comparators]
                if any(isinstance(v, ast.Constant) and v.value in ("torch", "jax") for v in values):
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []


def test_export_knows_no_backend_checkpoint_format():
    """export/ reads a run's LoRA through crosstune.train.session.read_run_lora only: no checkpoint folder names,
    no Orbax, no backend modules."""
    found = []
    for path in sorted((SRC / "crosstune" / "export").glob("*.py")):
        for line, text in _constants(path):
            if any(word in text for word in ("checkpoint-", "model_params", "optimizer_state", "checkpoints/")):
                found.append(f"{path.relative_to(SRC)}:{line}: {text!r}")
        for line, target in crosstune_imports(path, SRC):
            if target.startswith("crosstune.train.") and target not in (
                "crosstune.train.session", "crosstune.train.integrity", "crosstune.train.metrics"
            ):  # fmt: skip
                found.append(f"{path.relative_to(SRC)}:{line}: imports {target}")
        if "orbax" in path.read_text(encoding="utf-8"):
            found.append(f"{path.relative_to(SRC)}: mentions orbax")
    assert found == []


def test_the_command_and_both_backends_import_without_their_stacks():
    """Moving crosstune's own imports to the top kept the stacks lazy: the CLI with every command registered, the
    session and both backend modules load neither torch nor jax (a jax import before the backend sets XLA_FLAGS
    would fix the CPU device count too early)."""
    import subprocess
    import sys

    code = (
        "import sys; import crosstune.train.jax_backend, crosstune.train.torch_backend, crosstune.train.session; "
        "from crosstune.cli import _register; _register(); "
        "print(sorted(m for m in ('torch', 'jax', 'transformers', 'tunix', 'flax', 'trl', 'peft', 'orbax', 'grain') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={
        "PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert out.stdout.strip() == "[]"
