"""The registry of task kinds; the order here fixes how records are assigned, so only append to it."""

from __future__ import annotations

from crosstune.synth.design import TaskKind
from crosstune.synth.tasks import arith, counters, fsm, logic, routing, storage

TASK_KINDS: tuple[TaskKind, ...] = (
    logic.TASK_KINDS + routing.TASK_KINDS + arith.TASK_KINDS + counters.TASK_KINDS + storage.TASK_KINDS + fsm.TASK_KINDS
)
TASK_KIND_BY_NAME: dict[str, TaskKind] = {f.name: f for f in TASK_KINDS}

__all__ = ["TASK_KINDS", "TASK_KIND_BY_NAME"]
