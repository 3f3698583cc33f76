"""Problem sets by layout: VerilogEval v2 read by problems.txt (never by globbing: upstream folders hold a stray
.sv), RTLLM by its design folders (rtllm.py). `load_problems` tells them apart.

VerilogEval: a v2 checkout (`dataset_spec-to-rtl/`, `dataset_code-complete-iccad2023/`), one of those task folders,
or any folder that itself holds problems.txt in the same layout (the synthetic sets). RTLLM: a checkout (v2.0's
category folders or v1.1's flat layout), a category folder, or one design folder.
"""

from __future__ import annotations

from pathlib import Path

from crosstune.evals.problems.benchmark import (
    CODE_COMPLETE,
    RTLLM,
    SPEC_TO_RTL,
    VERILOGEVAL_TASKS,
    Problem,
    ProblemSetError,
    problem_file,
    select,
)
from crosstune.evals.problems.rtllm import is_rtllm, load_rtllm

TASK_FOLDERS = {SPEC_TO_RTL: "dataset_spec-to-rtl", CODE_COMPLETE: "dataset_code-complete-iccad2023"}
__all__ = ["CODE_COMPLETE", "RTLLM", "SPEC_TO_RTL", "Problem", "ProblemSetError", "load_problems", "select"]


def _task_of(folder: Path) -> str:
    """Code-complete sets are recognised by their folder name or by the presence of _ifc.txt files."""
    if folder.name == TASK_FOLDERS[CODE_COMPLETE] or any(folder.glob("*_ifc.txt")):
        return CODE_COMPLETE
    return SPEC_TO_RTL


def _read(root: Path, path: Path, problem: str, listing: Path) -> str:
    if not path.is_file():
        raise ProblemSetError(f"{path}: missing file of problem {problem!r} (listed in {listing})")
    return problem_file(root, path).read_text(encoding="utf-8", errors="replace")


def load_folder(folder: Path, root: Path | None = None) -> list[Problem]:
    """All problems of one task folder, in problems.txt order; every file read stays inside `root` (the problem
    set the user named; default: the folder)."""
    root = folder if root is None else root
    listing = folder / "problems.txt"
    if not listing.is_file():
        raise ProblemSetError(f"{listing}: no problems.txt; a problem folder lists its problems there")
    task = _task_of(folder)
    problems = []
    lines = problem_file(root, listing).read_text(encoding="utf-8").splitlines()
    for lineno, line in enumerate(lines, start=1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        if "/" in name or name.startswith("."):
            raise ProblemSetError(f"{listing}:{lineno}: {name!r} is not a problem name")
        ifc = _read(root, folder / f"{name}_ifc.txt", name, listing) if task == CODE_COMPLETE else None
        problems.append(
            Problem(
                name=name,
                task=task,
                prompt=_read(root, folder / f"{name}_prompt.txt", name, listing),
                ref=_read(root, folder / f"{name}_ref.sv", name, listing),
                test=_read(root, folder / f"{name}_test.sv", name, listing),
                ifc=ifc,
                folder=folder,
            )
        )
    if not problems:
        raise ProblemSetError(f"{listing}: lists no problems")
    return problems


def resolve_folder(path: Path, task: str = SPEC_TO_RTL) -> Path:
    """The task folder to read: `path` itself when it holds problems.txt, else its `task` subfolder."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ProblemSetError(f"{path}: no such problem folder")
    if (path / "problems.txt").is_file():
        return path
    if task not in VERILOGEVAL_TASKS:
        raise ProblemSetError(f"unknown task {task!r}; choose one of {', '.join(VERILOGEVAL_TASKS)}")
    sub = path / TASK_FOLDERS[task]
    if (sub / "problems.txt").is_file():
        return sub
    raise ProblemSetError(
        f"{path}: neither holds problems.txt nor {TASK_FOLDERS[task]}/problems.txt; pass a VerilogEval v2 "
        "checkout, one of its dataset_* folders, or a synthetic problem folder"
    )


def is_verilogeval(path: Path) -> bool:
    path = Path(path)
    return (path / "problems.txt").is_file() or any(
        (path / f / "problems.txt").is_file() for f in TASK_FOLDERS.values()
    )


def suite_of(path: Path) -> str:
    """ "verilogeval" or "rtllm": the layout of the problem set at `path` (ProblemSetError when neither)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ProblemSetError(f"{path}: no such problem folder")
    if is_verilogeval(path):
        return "verilogeval"
    if is_rtllm(path):
        return "rtllm"
    raise ProblemSetError(
        f"{path}: neither holds problems.txt nor {TASK_FOLDERS[SPEC_TO_RTL]}/problems.txt, nor RTLLM design folders; "
        "pass a VerilogEval v2 checkout, one of its dataset_* folders, a synthetic problem folder or an RTLLM checkout"
    )


def load_problems(path: Path, task: str | None = None, patterns: list[str] | None = None) -> list[Problem]:
    """Read a problem set (see module doc) and keep the problems selected by `patterns`. `task` picks a VerilogEval
    task folder (default spec-to-rtl); an RTLLM set has one task, `rtllm`."""
    path = Path(path).expanduser()
    if suite_of(path) == "rtllm":
        if task not in (None, RTLLM):
            raise ProblemSetError(f"{path} is an RTLLM checkout: --task {task} applies to VerilogEval only")
        return load_rtllm(path, patterns)
    if task == RTLLM:
        raise ProblemSetError(f"{path} is a VerilogEval problem set, not RTLLM")
    return select(load_folder(resolve_folder(path, task or SPEC_TO_RTL), root=path), patterns)
