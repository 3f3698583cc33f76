"""The suite collects the same way under plain `pytest` and `python -m pytest`, and every test has a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

# One file importing `tests.helpers.export`, one importing a helper by its bare name: the two styles in use.
FILES = ["tests/export/test_integrity.py", "tests/data/test_prepare.py"]


def _collect(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # Only the package's own folder on PYTHONPATH: the repo root must come from the pytest config, not from here.
    env["PYTHONPATH"] = str(REPO / "src")
    args = [*command, "--collect-only", "-q", "-p", "no:cacheprovider", *(str(REPO / f) for f in FILES)]
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("how", ["pytest", "python -m pytest"])
def test_plain_pytest_and_module_pytest_collect_alike(how, tmp_path):
    pytest_script = Path(sys.executable).with_name("pytest")
    command = [str(pytest_script)] if how == "pytest" else [sys.executable, "-m", "pytest"]
    # From another folder too: `python -m pytest` would otherwise get the repo root from the working directory.
    result = _collect(command, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert any(line.startswith("tests/export/test_integrity.py::") for line in collected), result.stdout[-2000:]
    assert any(line.startswith("tests/data/test_prepare.py::") for line in collected), result.stdout[-2000:]


def test_every_test_has_a_timeout(request):
    assert request.config.getini("timeout") == "300"
    assert request.node.get_closest_marker("timeout") is None  # the default applies to fast tests


@pytest.mark.slow
def test_slow_tests_get_the_longer_timeout(request):
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None and marker.args == (900,)
