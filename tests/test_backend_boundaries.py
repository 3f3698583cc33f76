"""What lies behind crosstune.train's backend registry stays there: no backend branches elsewhere in train/, no
checkpoint format known to export/, one module spelling each run file's name, and the stacks imported lazily."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.import_graph import module_name, package_imports
from tests.helpers.paths import REPO

SRC = REPO / "src"


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
    no Orbax, no training modules but the session."""
    found = []
    for path in sorted((SRC / "crosstune" / "export").glob("*.py")):
        for line, text in _constants(path):
            if any(word in text for word in ("checkpoint-", "model_params", "optimizer_state", "checkpoints/")):
                found.append(f"{path.relative_to(SRC)}:{line}: {text!r}")
        for line, target in package_imports(path, SRC):
            if target.startswith("crosstune.train") and target != "crosstune.train.session":
                found.append(f"{path.relative_to(SRC)}:{line}: imports {target}")
        if "orbax" in path.read_text(encoding="utf-8"):
            found.append(f"{path.relative_to(SRC)}: mentions orbax")
    assert found == []


def test_each_run_file_name_is_spelled_in_one_module():
    """run.json, recipe.yaml and metrics.jsonl are named by crosstune.run.layout alone (its constants)."""
    spelled: dict[str, set[str]] = {}
    for path in sorted((SRC / "crosstune").rglob("*.py")):
        for _, text in _constants(path):
            if text in ("run.json", "recipe.yaml", "metrics.jsonl"):
                spelled.setdefault(text, set()).add(module_name(path, SRC))
    assert spelled == {name: {"crosstune.run.layout"} for name in ("run.json", "recipe.yaml", "metrics.jsonl")}


def test_the_command_and_both_backends_import_without_their_stacks():
    """Moving crosstune's own imports to the top kept the stacks lazy: the CLI with every command registered, the
    session and both backend modules load neither torch nor jax (a jax import before the backend sets XLA_FLAGS
    would fix the CPU device count too early)."""
    import subprocess
    import sys

    code = (
        "import sys; import crosstune.train.jax.backend, crosstune.train.torch.backend, crosstune.train.session; "
        "from crosstune.cli import _register; _register(); "
        "print(sorted(m for m in ('torch', 'jax', 'transformers', 'tunix', 'flax', 'trl', 'peft', 'orbax', 'grain') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "[]"
