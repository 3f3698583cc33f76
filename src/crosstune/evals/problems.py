"""VerilogEval v2 problem sets: read by problems.txt (never by globbing; upstream folders hold a stray .sv).

Accepts a VerilogEval v2 checkout (`dataset_spec-to-rtl/`, `dataset_code-complete-iccad2023/`), one of
those task folders, or any folder that itself holds problems.txt in the same layout (the synthetic sets).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from crosstune.errors import CrosstuneError

SPEC_TO_RTL = "spec-to-rtl"
CODE_COMPLETE = "code-complete-iccad2023"
TASK_FOLDERS = {SPEC_TO_RTL: "dataset_spec-to-rtl", CODE_COMPLETE: "dataset_code-complete-iccad2023"}


class ProblemSetError(CrosstuneError, ValueError):
    """A problem set is missing, malformed, or a selection matched nothing."""


@dataclass(frozen=True)
class Problem:
    """One problem: texts of its prompt, reference, testbench and (code-complete only) interface."""

    name: str  # e.g. "Prob001_zero"
    task: str  # SPEC_TO_RTL or CODE_COMPLETE
    prompt: str
    ref: str
    test: str
    ifc: str | None
    folder: Path


def _task_of(folder: Path) -> str:
    """Code-complete sets are recognised by their folder name or by the presence of _ifc.txt files."""
    if folder.name == TASK_FOLDERS[CODE_COMPLETE] or any(folder.glob("*_ifc.txt")):
        return CODE_COMPLETE
    return SPEC_TO_RTL


def _read(path: Path, problem: str, listing: Path) -> str:
    if not path.is_file():
        raise ProblemSetError(f"{path}: missing file of problem {problem!r} (listed in {listing})")
    return path.read_text(encoding="utf-8", errors="replace")


def load_folder(folder: Path) -> list[Problem]:
    """All problems of one task folder, in problems.txt order."""
    listing = folder / "problems.txt"
    if not listing.is_file():
        raise ProblemSetError(f"{listing}: no problems.txt; a problem folder lists its problems there")
    task = _task_of(folder)
    problems = []
    for lineno, line in enumerate(listing.read_text(encoding="utf-8").splitlines(), start=1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        if "/" in name or name.startswith("."):
            raise ProblemSetError(f"{listing}:{lineno}: {name!r} is not a problem name")
        ifc = _read(folder / f"{name}_ifc.txt", name, listing) if task == CODE_COMPLETE else None
        problems.append(
            Problem(
                name=name,
                task=task,
                prompt=_read(folder / f"{name}_prompt.txt", name, listing),
                ref=_read(folder / f"{name}_ref.sv", name, listing),
                test=_read(folder / f"{name}_test.sv", name, listing),
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
    if task not in TASK_FOLDERS:
        raise ProblemSetError(f"unknown task {task!r}; choose one of {', '.join(TASK_FOLDERS)}")
    sub = path / TASK_FOLDERS[task]
    if (sub / "problems.txt").is_file():
        return sub
    raise ProblemSetError(
        f"{path}: neither holds problems.txt nor {TASK_FOLDERS[task]}/problems.txt; pass a VerilogEval v2 "
        "checkout, one of its dataset_* folders, or a synthetic problem folder"
    )


def select(problems: list[Problem], patterns: list[str] | None) -> list[Problem]:
    """Problems whose name matches any of `patterns` (exact names or fnmatch globs, comma lists allowed)."""
    if not patterns:
        return problems
    wanted = [p.strip() for pattern in patterns for p in pattern.split(",") if p.strip()]
    chosen = [p for p in problems if any(fnmatch.fnmatchcase(p.name, w) for w in wanted)]
    unmatched = [w for w in wanted if not any(fnmatch.fnmatchcase(p.name, w) for p in problems)]
    if unmatched:
        raise ProblemSetError(f"no problem matches {', '.join(map(repr, unmatched))}")
    return chosen


def load_problems(path: Path, task: str = SPEC_TO_RTL, patterns: list[str] | None = None) -> list[Problem]:
    """Read a problem set (see module doc) and keep the problems selected by `patterns`."""
    return select(load_folder(resolve_folder(path, task)), patterns)
