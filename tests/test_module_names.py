"""A file name says one role: no name in two folders of src/crosstune unless the folders mirror each other on
purpose (MIRRORS) or the name means one role wherever it stands (SAME_ROLE); and no package's face binds, under the
name of one of its own modules, something else."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.import_graph import imports_of, modules
from tests.helpers.paths import REPO

SRC = REPO / "src"

# Folders that mirror each other on purpose: a file name there is the same role in each.
MIRRORS: list[tuple[tuple[str, ...], str]] = [
    (("train/torch", "train/jax"), "the two backends, file for file (backend, worker, model, lora, probe, ...)"),
    (("families/gemma3", "families/gemma4"), "one folder per family, the same files in each"),
]
# Names that mean one role wherever they stand (None: in any folder).
SAME_ROLE: dict[str, tuple[tuple[str, ...] | None, str]] = {
    "__init__.py": (None, "a package's face"),
    "cli.py": (None, "an area's commands, with register(app)"),
    "backend.py": (("train", "train/torch", "train/jax"), "the backend contract, and each backend implementing it"),
    "runner.py": (("evals", "study", "demo"), "an area's pipeline as one library call: run_eval, run_study, run_demo"),
}


def reused_names(src: Path = SRC) -> list[str]:
    """File names found in two folders or more that no mirror or SAME_ROLE entry explains."""
    where: dict[str, list[str]] = {}
    for path in sorted((src / "crosstune").rglob("*.py")):
        where.setdefault(path.name, []).append(path.parent.relative_to(src / "crosstune").as_posix())
    problems = []
    for name, folders in sorted(where.items()):
        allowed, _ = SAME_ROLE.get(name, ((), ""))
        if len(folders) < 2 or allowed is None or set(folders) <= set(allowed):
            continue
        if not any(set(folders) <= set(group) for group, _ in MIRRORS):
            problems.append(f"{name}: {', '.join(folders)}")
    return problems


def test_a_file_name_says_one_role():
    assert reused_names() == []


def test_no_package_face_binds_the_name_of_one_of_its_modules():
    """`crosstune.planner.plan_recipe` was both a function the face re-exports and a module: `from crosstune.planner
    import plan_recipe` then means one or the other by import order."""
    known, found = modules(SRC), []
    for me, path in known.items():
        for _, base, names in imports_of(path, SRC) if path.name == "__init__.py" else []:
            found += [f"{me}.{n} (from {base})" for n in names if f"{me}.{n}" in known and f"{base}.{n}" not in known]
    assert found == []


def test_the_name_checker_catches_a_name_used_twice(tmp_path):
    for folder in ("export", "serve", "train/torch", "train/jax", "demo", "study"):
        (tmp_path / "crosstune" / folder).mkdir(parents=True)
    for file in (
        "export/table.py",
        "serve/table.py",
        "train/torch/model.py",
        "train/jax/model.py",
        "demo/stages.py",
        "study/stages.py",
        "serve/cli.py",
        "export/cli.py",
        "study/runner.py",
        "serve/runner.py",
    ):
        (tmp_path / "crosstune" / file).write_text("")
    assert reused_names(tmp_path) == ["runner.py: serve, study", "stages.py: demo, study", "table.py: export, serve"]
