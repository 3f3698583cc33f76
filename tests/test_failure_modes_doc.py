"""docs/FAILURE_MODES.md names the test that holds each guarantee: every `tests/…py::name` (and the `::name`
shorthands after it on the same line) must be a test that exists, so a renamed or deleted test can't leave a
guarantee pointing at nothing."""

from __future__ import annotations

import re

from tests.helpers.paths import REPO

DOC = REPO / "docs" / "FAILURE_MODES.md"
REF = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`|`::(\w+)`")


def test_every_named_test_exists():
    missing, seen = [], 0
    for number, line in enumerate(DOC.read_text().splitlines(), 1):
        current = None
        for m in REF.finditer(line):
            current = m.group(1) or current
            name = m.group(2) if m.group(1) else m.group(3)
            if current is None:
                missing.append(f"line {number}: `::{name}` without a file before it")
                continue
            path = REPO / current
            seen += 1
            if not path.is_file():
                missing.append(f"line {number}: {current} does not exist")
            elif name and not re.search(rf"^(async )?def {name}\b", path.read_text(), re.M):
                missing.append(f"line {number}: {current} has no test {name}")
    assert seen > 50 and not missing, "\n".join(missing)
