"""RTLLM problem sets (hkust-zhiyao/RTLLM): one folder per design, found anywhere under the checkout.

A design folder holds `design_description.txt` (the prompt), `testbench.v`, the reference `verified_*.v` and a
`makefile` whose TEST_DESIGN names the file VCS compiles. v2.0 nests the folders by category, v1.1 keeps them at
the top: both are found by walking the tree. The module the design must define is the one the testbench
instantiates: TEST_DESIGN where the testbench uses that name, else the description's "Module name:" (TEST_DESIGN
is a file name; three v2.0 makefiles name a module the testbench never instantiates, see docs/EVAL_SANDBOX.md).
The reference becomes a design by renaming its `verified_*` module to that name. Other files in the folder are
data the testbench reads ($readmemh, $fopen): they are copied next to it for every run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from crosstune.evals.problems.benchmark import RTLLM, Problem, ProblemSetError, problem_file, select
from crosstune.evals.problems.verilog_source import blank_comments_and_strings

DESCRIPTION, TESTBENCH, MAKEFILE = "design_description.txt", "testbench.v", "makefile"
MAX_DATA_FILE_BYTES = 1 << 20
SAMPLE_FILES = {"raw.sv", "deps.txt", "sample.sv", "test.sv", "ref.sv", "timescale.v", "sim", "alone"}
MAX_DEPTH = 4  # v2.0: <category>/<kind>/<design>; deeper folders are not searched

_TEST_DESIGN = re.compile(r"^\s*TEST_DESIGN\s*:?=\s*(\S+)", re.MULTILINE)
_MODULE_NAME = re.compile(r"Module name\s*:\s*([A-Za-z_]\w*)", re.IGNORECASE)
_MODULE = re.compile(r"\bmodule\s+([A-Za-z_]\w*)")
_PASS_DISPLAY = re.compile(r'\$display\s*\(\s*"(?:[^"\\\n]|\\.)*Your Design Passed(?:[^"\\\n]|\\.)*"[^;]*\)\s*;')
_FAIL_DISPLAY = re.compile(
    r'\$display\s*\(\s*"(?:[^"\\\n]|\\.)*(?:fail|error)(?:[^"\\\n]|\\.)*"[^;]*\)\s*;', re.IGNORECASE
)


def design_folders(root: Path) -> list[Path]:
    """Every folder under `root` (itself included, at most MAX_DEPTH down) holding an RTLLM design, sorted by path.
    A link to a folder is not followed (crosstune.confinement): a design is a real folder of the checkout."""
    root, found = Path(root), []
    for dirpath, dirnames, filenames in os.walk(root):
        if len(Path(dirpath).relative_to(root).parts) >= MAX_DEPTH:
            dirnames[:] = []
        if MAKEFILE in filenames and (Path(dirpath) / DESCRIPTION).is_file():
            found.append(Path(dirpath))
    return sorted(found)


def is_rtllm(path: Path) -> bool:
    return Path(path).is_dir() and bool(design_folders(path))


def _instantiated(blanked: str, module: str) -> bool:
    """Whether the (comment-blanked) source instantiates `module`: `module #(...) name (` or `module name (`."""
    body = _MODULE.sub("module _", blanked)  # a declaration `module m #(` is not an instance
    pattern = rf"(?<![\w$.]){re.escape(module)}\s*(?:#\s*\(|[A-Za-z_]\w*\s*(?:\[[^\]]*\]\s*)?\()"
    return re.search(pattern, body) is not None


def design_module(folder: Path, makefile: str, description: str, testbench: str) -> str:
    """The module the testbench instantiates: TEST_DESIGN if it does, else the description's module name."""
    blanked = blank_comments_and_strings(testbench)
    test_design = _TEST_DESIGN.search(makefile)
    described = _MODULE_NAME.search(description)
    candidates = [m.group(1) for m in (test_design, described) if m]
    for name in candidates:
        if _instantiated(blanked, name):
            return name
    raise ProblemSetError(
        f"{folder / TESTBENCH}: instantiates neither the makefile's TEST_DESIGN nor the description's module name "
        f"({', '.join(candidates) or 'neither is given'}); the design's name comes from one of them"
    )


def _reference(root: Path, folder: Path, top: str) -> tuple[str, str]:
    """The reference's text and the module in it to rename to `top` (`top` itself when already so named)."""
    refs = sorted(folder.glob("verified_*.v"))
    if len(refs) != 1:
        raise ProblemSetError(f"{folder}: expected one verified_*.v reference, found {len(refs)}")
    text = problem_file(root, refs[0]).read_text(encoding="utf-8", errors="replace")
    modules = _MODULE.findall(blank_comments_and_strings(text))
    if top in modules:
        return text, top
    verified = [m for m in modules if m.startswith("verified_")]
    if len(verified) != 1:
        raise ProblemSetError(f"{refs[0]}: defines neither {top} nor exactly one verified_* module ({modules})")
    return text, verified[0]


def _data_files(root: Path, folder: Path) -> tuple[tuple[str, bytes], ...]:
    known = {DESCRIPTION, TESTBENCH, MAKEFILE}
    files = []
    for path in sorted(folder.iterdir()):
        if not path.is_file() or path.name in known or path.name.startswith("verified_"):
            continue
        if path.name in SAMPLE_FILES:
            raise ProblemSetError(f"{path}: a data file may not be named like the evaluator's own files")
        if path.stat().st_size > MAX_DATA_FILE_BYTES:
            raise ProblemSetError(f"{path}: a testbench data file over {MAX_DATA_FILE_BYTES >> 20} MiB")
        files.append((path.name, problem_file(root, path).read_bytes()))
    return tuple(files)


def _testbench_modules(folder: Path, testbench: str) -> tuple[str, str]:
    """(the root module, every module the testbench defines); the root is the one no other instantiates."""
    blanked = blank_comments_and_strings(testbench)
    modules = _MODULE.findall(blanked)
    roots = [m for m in modules if not _instantiated(blanked, m)]
    if not modules or len(roots) != 1:
        raise ProblemSetError(f"{folder / TESTBENCH}: expected one top-level testbench module, found {roots}")
    return roots[0], tuple(modules)


def load_design(folder: Path, root: Path | None = None) -> Problem:
    """One RTLLM design folder as a Problem (errors name the file that is missing or malformed); every file read
    stays inside `root`, the problem set the user named (default: the folder)."""
    root = folder if root is None else root
    paths = {name: folder / name for name in (DESCRIPTION, TESTBENCH, MAKEFILE)}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise ProblemSetError(f"{missing[0]}: missing file of RTLLM design {folder.name!r}")
    description, testbench, makefile = (
        problem_file(root, paths[n]).read_text(encoding="utf-8", errors="replace")
        for n in (DESCRIPTION, TESTBENCH, MAKEFILE)
    )
    top = design_module(folder, makefile, description, testbench)
    ref, ref_top = _reference(root, folder, top)
    instrument_testbench(testbench, "0", where=str(paths[TESTBENCH]))  # fails here, naming the file
    tb_top, tb_modules = _testbench_modules(folder, testbench)
    return Problem(
        name=folder.name,
        task=RTLLM,
        prompt=description,
        ref=ref,
        test=testbench,
        ifc=None,
        folder=folder,
        top=top,
        ref_top=ref_top,
        testbench_top=tb_top,
        testbench_modules=tb_modules,
        testbench_instances=tb_modules,
        data_files=_data_files(root, folder),
    )


def load_rtllm(root: Path, patterns: list[str] | None = None) -> list[Problem]:
    """Every design under `root` (a checkout, a category folder or one design), selected by `patterns`."""
    folders = design_folders(root)
    if not folders:
        raise ProblemSetError(f"{root}: holds no RTLLM design folder (makefile + {DESCRIPTION})")
    names = [f.name for f in folders]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ProblemSetError(f"{root}: design names must be unique, found several folders named {twice[0]!r}")
    chosen = {p.name for p in select([_stub(f) for f in folders], patterns)}
    return [load_design(f, root) for f in folders if f.name in chosen]


def _stub(folder: Path) -> Problem:
    """A name-only Problem for selection: only the selected designs are read."""
    return Problem(folder.name, RTLLM, "", "", "", None, folder)


def instrument_testbench(test: str, token: str, where: str = "testbench") -> str:
    """Add a result line carrying `token` after the testbench's pass display and after each failure display.

    The strict verdict counts these lines only: `<token> pass` for "Your Design Passed", `<token> fail` for every
    display whose text says fail or error. The original displays stay, so the upstream rule reads its usual log.
    """
    if len(_PASS_DISPLAY.findall(blank_comments(test))) < 1:
        raise ProblemSetError(f'{where}: no `$display("... Your Design Passed ...")`; the evaluator reads it')

    def tag(kind: str):
        return lambda m: f'begin {m.group(0)} $display("{token} {kind}"); end'

    marked = _PASS_DISPLAY.sub(tag("pass"), test)
    return _FAIL_DISPLAY.sub(tag("fail"), marked)


def blank_comments(source: str) -> str:
    """Comments become spaces, strings stay (the display texts are what the instrumentation looks for)."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), source, flags=re.DOTALL)
