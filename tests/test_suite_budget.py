"""The default suite's CPU budget (tests/helpers/budget.py, tests/budget.toml): every top-level test folder has a
budget and none is left over; reports are summed per folder; a folder over its budget is named."""

from __future__ import annotations

from types import SimpleNamespace

from tests.helpers.budget import ROOT, FolderTotals, folder_of, load_budget
from tests.helpers.paths import REPO


def test_every_test_folder_has_a_budget_and_every_budget_a_folder():
    tests = REPO / "tests"
    folders = {p.relative_to(tests).parts[0] for p in tests.rglob("test_*.py") if p.parent != tests}
    assert set(load_budget()) == folders | {ROOT}


def test_reports_are_summed_per_top_level_folder_and_the_one_over_is_named():
    def report(nodeid, when, duration, cpu=None):
        return SimpleNamespace(
            nodeid=nodeid, when=when, duration=duration, user_properties=[] if cpu is None else [("cpu_s", cpu)]
        )

    totals = FolderTotals()
    for r in [
        report("tests/train/jax/test_a.py::t", "setup", 1.0),
        report("tests/train/jax/test_a.py::t", "call", 2.0),
        report("tests/train/jax/test_a.py::t", "teardown", 0.5, cpu=3.0),
        report("tests/train/test_b.py::u[x]", "teardown", 0.0, cpu=4.5),
        report("tests/test_cli.py::v", "teardown", 0.25, cpu=0.5),
    ]:
        totals.pytest_runtest_logreport(r)
    assert folder_of("tests/train/jax/test_a.py::t") == "train" and folder_of("tests/test_cli.py::v") == ROOT
    assert dict(totals.cpu) == {"train": 7.5, ROOT: 0.5}
    assert dict(totals.wall) == {"train": 3.5, ROOT: 0.25} and dict(totals.tests) == {"train": 2, ROOT: 1}
    assert totals.over_budget({"train": 7.0, ROOT: 1.0}) == ["train"]
    assert totals.over_budget({"train": 8.0}) == [ROOT]  # a folder without a budget is over it
