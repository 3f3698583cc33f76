"""The registry of task families; the order here fixes how records are assigned, so only append to it."""

from __future__ import annotations

from crosstune.synth.design import Family
from crosstune.synth.tasks import arith, counters, fsm, logic, routing, storage

FAMILIES: tuple[Family, ...] = (
    logic.FAMILIES + routing.FAMILIES + arith.FAMILIES + counters.FAMILIES + storage.FAMILIES + fsm.FAMILIES
)
FAMILY_BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}

__all__ = ["FAMILIES", "FAMILY_BY_NAME"]
