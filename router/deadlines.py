"""Request deadlines on the router's hot path: one sweeper task, not a timer per request.

A timer per request (``asyncio.timeout``) measured as ~8% of the per-request CPU on the
short-request bench; so each request's handler task is entered in a table with its monotonic
deadline, and one task looks at the table every ``TICK_S`` and cancels the overdue handlers,
marking their outcome ``timed_out`` (the proxy tells its own deadline from a client leaving by it).
The same tick runs ``on_tick`` (the proxy's per-try limits, ``router.pertry``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from meridian import waits

TICK_S = 0.05


class Outcome(Protocol):
    timed_out: bool


class Deadlines:
    def __init__(self, on_tick: Callable[[float], None] | None = None, tick_s: float = TICK_S):
        self._at: dict[asyncio.Task, tuple[float, Outcome]] = {}
        self._on_tick = on_tick
        self._tick_s = tick_s
        self._sweeper: asyncio.Task | None = None

    def set(self, task: asyncio.Task, at: float, outcome: Outcome) -> None:
        """``task`` is cancelled (``outcome.timed_out`` set) once the monotonic clock passes ``at``;
        setting it again moves the deadline."""
        self._at[task] = (at, outcome)

    def move(self, task: asyncio.Task, at: float, outcome: Outcome) -> None:
        """Move the deadline of a task still under one (not one already cancelled by it)."""
        if task in self._at:
            self._at[task] = (at, outcome)

    def clear(self, task: asyncio.Task) -> None:
        self._at.pop(task, None)

    def start(self) -> None:
        """Start the sweeper (call from the running loop)."""
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="deadline-sweeper")

    async def stop(self) -> None:
        if self._sweeper is not None:
            await waits.cancelled(self._sweeper)
            self._sweeper = None

    async def _sweep(self) -> None:
        at = self._at
        while True:
            await asyncio.sleep(self._tick_s)
            if self._on_tick is not None:
                self._on_tick(time.monotonic())
            if not at:
                continue
            now = time.monotonic()
            overdue = [(task, outcome) for task, (deadline, outcome) in at.items() if deadline <= now]
            for task, outcome in overdue:
                del at[task]
                outcome.timed_out = True
                task.cancel()
