"""bench/tpu_moe_layouts.py, which timed on the v5e chip how a scan over MoE layers could hold its experts
(docs/BENCHMARKS.md, "The 26B-A4B's experts in a scan"): its five ways compute the same gradient, here at CPU-sized
shapes, so the chip's times compare programs that agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO


def test_the_five_ways_of_holding_experts_give_one_gradient(tmp_path):
    out = tmp_path / "ways.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "tpu_moe_layouts.py"), "--small", "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ways = {k: v for k, v in json.loads(out.read_text()).items() if isinstance(v, dict) and "checksum" in v}
    assert len(ways) == 5
    want = ways["unrolled"]["checksum"]
    # the checksum is Σ grad·probe over 32,768 elements of a bf16 gradient (its input's dtype), each within 2^-8
    # relative of another way's, errors as likely up as down: ~2^-8·√32768 ≈ 0.7 on a checksum of ~32,768 (2e-5).
    # A layer reading another layer's experts moves it by ~√32768 ≈ 180 (5e-3): the bound sits between
    for name, way in ways.items():
        assert way["checksum"] == pytest.approx(want, rel=2e-4), name
