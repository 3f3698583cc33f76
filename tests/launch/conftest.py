from __future__ import annotations

import os

import pytest

from tests.helpers.paths import REPO


@pytest.fixture(autouse=True)
def in_the_checkout(monkeypatch):
    monkeypatch.chdir(REPO)  # specs name the recipe relative to the checkout the job runs in


@pytest.fixture(autouse=True)
def no_cluster_of_this_host(monkeypatch, tmp_path):
    """An engine's CLI a test reaches by mistake finds no cluster of this host: Slurm's and kubectl's configurations
    point at files that don't exist (a test that starts its own cluster hands its clients its own)."""
    for variable in [v for v in os.environ if v.startswith(("SLURM_", "SBATCH_", "SRUN_"))]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-slurm.conf"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
