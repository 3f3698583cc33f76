"""Fixtures of the jax backend's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def mesh():
    """A 1 × 1 (fsdp × tp) mesh on this CPU."""
    from crosstune.train.jax.model import make_mesh

    return make_mesh(1, 1)
