"""Session fixtures built once per test run however many pytest-xdist workers run it (`make test` runs two).

The first worker to ask builds the thing under a file lock in the run's common temporary folder (all workers' base
folders share that parent: pytest-xdist's documented pattern); the others wait on the lock and reuse what it wrote.
Waiting costs no CPU, so the CPU budget (tests/budget.py) is charged once. Without xdist it is a plain session
fixture folder. What is built must be read-only to the tests: both workers' tests read the same files.
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

T = TypeVar("T")


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """build(folder) once per run (folder: empty, named `name`); returns what it returned (pickled for the others)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:  # one process: nothing to share
        return build(tmp_path_factory.mktemp(name))
    root = tmp_path_factory.getbasetemp().parent / "built-once"
    root.mkdir(exist_ok=True)
    folder, done = root / name, root / f"{name}.pickle"
    with FileLock(str(root / f"{name}.lock")):
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that failed half-way left it
            folder.mkdir()
            done.write_bytes(pickle.dumps(build(folder)))
        return pickle.loads(done.read_bytes())
