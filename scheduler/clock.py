"""The scheduler's one notion of time, injected everywhere so that the simulator and the tests drive
the control loop, the reconciler and liveness with a simulated clock.

``now()`` is Unix seconds (leases, directive timestamps, demand windows); ``sleep`` is the only way
scheduler code waits, so a ``ManualClock`` can step an entire scheduler without real waiting."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Current time, Unix seconds."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...


class SystemClock:
    """Wall time and real sleeping."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when told (``advance``/``set``). Sleepers wake, in deadline order, once
    the clock reaches their deadline; nothing waits in real time."""

    def __init__(self, start_s: float = 1_700_000_000.0):
        self._now = float(start_s)
        self._sleepers: list[tuple[float, int, asyncio.Future]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        await fut

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        self.set(self._now + seconds)

    def set(self, now_s: float) -> None:
        if now_s < self._now:
            raise ValueError(f"a clock cannot go back ({now_s} < {self._now})")
        self._now = float(now_s)
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)
