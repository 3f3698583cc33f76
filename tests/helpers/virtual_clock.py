"""An asyncio event loop on a virtual clock: when no callback is ready it jumps to its next timer instead of waiting,
so `asyncio.sleep(0.08)` takes no wall time and every time the loop reads is exact however loaded the host is.

Only for code whose every wait is a timer or another task of the same loop (an in-process httpx transport, never a
socket: a wait on a socket with a timer pending would jump the clock past it). Blocking calls made outside the loop
(a synchronous probe) take wall time the virtual clock does not see.

    summary = run_on_virtual_clock(run_sweep(cfg, folder, transport=httpx.MockTransport(handler)))
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """Polls instead of blocking; where the loop would block until its next timer, the clock jumps there."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None):
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer: what the loop waits for comes from outside it (a thread), in wall time
            return super().select(None)
        self._loop.now += timeout
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


def run_on_virtual_clock(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(coro) on a VirtualClockLoop."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(coro)
