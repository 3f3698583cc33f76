"""The fuzzer: every command of crosstune, driven with hostile inputs in a subprocess under a
memory and a time limit, over a tree with canaries outside it; each case must end as crosstune promises
(tests/fuzz/verdict.py). `make fuzz-ci`: seed 0, 8 cases per command; `make fuzz`: FUZZ_SEED, FUZZ_CASES.
Why a generator of our own rather than Hypothesis: docs/FAILURE_MODES.md, "The fuzzer"."""

from __future__ import annotations

import pytest

from tests.fuzz.session import all_cases, run_case


@pytest.mark.fuzz
@pytest.mark.parametrize(("command", "number"), all_cases(), ids=[f"{c}-{n}" for c, n in all_cases()])
def test_a_hostile_case_ends_as_crosstune_promises(command, number, world, runner, endpoint):
    report = run_case(command, number, world, runner, endpoint)
    assert not report, "\n".join(report)
