from __future__ import annotations

import pytest

from tests.helpers.paths import REPO


@pytest.fixture(autouse=True)
def in_the_checkout(monkeypatch):
    monkeypatch.chdir(REPO)  # specs name the recipe relative to the checkout the job runs in
