"""Each top-level test folder's CPU seconds in the default suite, against its budget in tests/budget.toml.

Why CPU seconds and not wall time: on a shared 2-core machine the same test's wall time doubles when others run,
while the CPU it burns (the test process's threads plus the child processes it waited for, from os.times) barely
moves, so a budget on it fails when a folder grew, not when the machine was busy. A folder over its budget fails the
run (exit 1) with one line per folder naming what to do. Only runs with the default marker expression (pyproject's
addopts) are checked: `-m slow` runs other tests, and a run of a few files sums less than the whole.
Session fixtures are charged to the first test that asks for them (built once: tests/helpers/shared.py).
"""

from __future__ import annotations

import os
import tomllib
from collections import defaultdict

import pytest

from tests.helpers.paths import REPO

BUDGET_FILE = REPO / "tests" / "budget.toml"
ROOT = "tests/*.py"  # the key of the test modules directly under tests/


def folder_of(nodeid: str) -> str:
    """tests/train/jax/test_x.py::t -> 'train'; tests/test_cli.py::t -> ROOT."""
    parts = nodeid.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 else ROOT


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _measured(item: pytest.Item):
    """Adds the CPU seconds of the hook it wraps to the item's total."""
    start = _cpu_seconds()
    yield
    item.stash[_CPU] = item.stash.get(_CPU, 0.0) + _cpu_seconds() - start


_CPU = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _measured(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _measured(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _measured(item)
    item.user_properties.append(("cpu_s", round(item.stash.get(_CPU, 0.0), 3)))  # travels to xdist's controller


class FolderTotals:
    """Sums the reports (in the controller under xdist, in the one process without)."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        folder = folder_of(report.nodeid)
        self.wall[folder] += report.duration
        if report.when == "teardown":
            self.tests[folder] += 1
            self.cpu[folder] += dict(report.user_properties).get("cpu_s", 0.0)

    def over_budget(self, budget: dict[str, float]) -> list[str]:
        return [f for f in sorted(self.cpu) if self.cpu[f] > budget.get(f, 0.0)]


def load_budget() -> dict[str, float]:
    return {k: float(v) for k, v in tomllib.loads(BUDGET_FILE.read_text())["cpu_seconds"].items()}


def _checked(config: pytest.Config) -> bool:
    """The run is the default suite's selection (its marker expression is addopts' own)."""
    addopts = config.getini("addopts")  # already split as a shell would
    default = addopts[addopts.index("-m") + 1] if "-m" in addopts else ""
    return not hasattr(config, "workerinput") and config.option.markexpr == default


def pytest_configure(config: pytest.Config) -> None:
    if _checked(config):
        config.pluginmanager.register(FolderTotals(), "folder-totals")


def pytest_sessionfinish(session: pytest.Session) -> None:
    totals = session.config.pluginmanager.get_plugin("folder-totals")
    if totals is not None and totals.over_budget(load_budget()) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    totals = config.pluginmanager.get_plugin("folder-totals")
    if totals is None or not totals.cpu:
        return
    budget = load_budget()
    tr = terminalreporter
    tr.section("CPU seconds per test folder (budget: tests/budget.toml)")
    tr.line(f"{'folder':<12} {'tests':>5} {'wall s':>7} {'CPU s':>7} {'budget':>7}")
    for f in sorted(totals.cpu, key=totals.cpu.get, reverse=True):
        tr.line(f"{f:<12} {totals.tests[f]:>5} {totals.wall[f]:>7.0f} {totals.cpu[f]:>7.0f} {budget.get(f, 0):>7.0f}")
    tr.line(
        f"{'all':<12} {sum(totals.tests.values()):>5} {sum(totals.wall.values()):>7.0f} "
        f"{sum(totals.cpu.values()):>7.0f} {sum(budget.values()):>7.0f}"
    )
    for f in totals.over_budget(budget):
        where = f if f == ROOT else f"tests/{f}"
        tr.line(
            f"{where}: {totals.cpu[f]:.0f} CPU s, over its budget of {budget.get(f, 0):.0f} s in tests/"
            "budget.toml: share the expensive fixture, or mark what is long @pytest.mark.slow (saying why), "
            "or raise the budget with the measurement in docs/BENCHMARKS.md",
            red=True,
            bold=True,
        )
