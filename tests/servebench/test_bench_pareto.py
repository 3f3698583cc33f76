"""The Pareto chart of a sweep (servebench.pareto): tokens/s per user against tokens/s per chip and per dollar, the
frontier of the cells no other cell beats on both, and pareto.png beside the summary."""

from __future__ import annotations

import pytest

from crosstune.hardware import HARDWARE
from crosstune.servebench import pareto

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def cell(conc: int, throughput: float, per_user: float | None, completed: int = 4) -> dict:
    return {
        "context_len": 512,
        "concurrency": conc,
        "request_rate": None,
        "completed": completed,
        "output_throughput": throughput,
        "output_throughput_per_user": per_user,
    }


def test_points_frontier_and_chips():
    summary = {
        "model": "m",
        "target": "tpu-v6e-8",
        "cells": [
            cell(1, 100.0, 100.0),
            cell(4, 360.0, 90.0),
            cell(8, 400.0, 50.0),
            cell(16, 380.0, 24.0),
            cell(32, 0.0, None, completed=0),
        ],
    }
    pts = pareto.points(summary)
    assert [p["per_chip"] for p in pts] == [12.5, 45.0, 50.0, 47.5]  # 8 chips on a v6e-8; the empty cell dropped
    # concurrency 16 is beaten by 8 on both axes; the rest trade one for the other
    assert [p["load"] for p in pareto.frontier(pts)] == ["concurrency 8", "concurrency 4", "concurrency 1"]
    assert pareto.chips(None) == (1, "no --target: per server") and pareto.chips("2xh100") == (2, "2 chips (2xh100)")
    # a summary from before per-user throughput: vLLM's throughput / concurrency
    assert pareto.per_user({**cell(4, 360.0, None)}) == 90.0
    assert pareto.tokens_per_dollar(100.0, 36.0) == pytest.approx(10_000.0)  # 360,000 tokens an hour for $36


def test_pareto_png_beside_the_summary(tmp_path):
    target = next(name for name, hw in HARDWARE.items() if hw.price_per_hour)  # a priced target: two panels
    summary = {"model": "m", "target": target, "cells": [cell(1, 100.0, 100.0), cell(4, 360.0, 90.0)]}
    path = pareto.write_pareto(summary, tmp_path)
    assert path == tmp_path / "pareto.png" and path.read_bytes().startswith(PNG_MAGIC)
    assert pareto.write_pareto({"model": "m", "cells": [cell(1, 0.0, None, completed=0)]}, tmp_path / "x") is None
