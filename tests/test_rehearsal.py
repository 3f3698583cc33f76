"""The real-dimension rehearsal: bench/rehearsal.py on Gemma 4 31B's true dimensions with 2
layers in the hub's layout, prepare -> train torch -> train jax -> export both -> parity. ~15 min and ~15 GB of
host memory on 2 cores, more on a shared one: too long for the slow suite's share of CI's hour, so its own marker
(`make test-rehearsal`); on a shared machine run it under `flock /tmp/crosstune-heavy.lock`. REHEARSAL_ARGS adds
arguments (e.g. "--jax-vocab 262144")."""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO


@pytest.mark.rehearsal
@pytest.mark.timeout(3600)
def test_the_31b_dimensions_go_through_every_stage(tmp_path):
    out = tmp_path / "rehearsal.json"
    cmd = [sys.executable, str(REPO / "bench" / "rehearsal.py"), "--work", str(tmp_path / "work"), "--json", str(out)]
    cmd += shlex.split(os.environ.get("REHEARSAL_ARGS", ""))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3500)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    print(done.stdout)  # the stage table, for the record (pytest -s)
    names = [s["stage"] for s in result["stages"]]
    assert names[0] == "build (vocab 262,144)" and names[-1] == "parity (bf16)"
    assert all(s["rc"] == 0 for s in result["stages"])
    checks = result["checks"]
    for backend in ("torch", "jax"):
        losses = checks["losses"][backend]
        assert len(losses) == 2 and all(math.isfinite(x) for x in losses), (backend, losses)
        merged = checks["merged"][backend]
        assert merged["equal"] and merged["changed"] and merged["vision_untouched"], (backend, merged)
    assert checks["parity_ok"]
