"""Injected time: the supervisor, the scraper and the emulator's engine read time and sleep only
through a Clock, so tests (and the simulator) can drive them with a virtual one."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a monotonic scale (durations)."""

    def time(self) -> float:
        """Unix seconds (timestamps in reports)."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""


class SystemClock:
    """Wall-clock time and real asyncio sleeps."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class VirtualClock:
    """Time that moves only when someone sleeps: ``sleep(s)`` advances it by ``s`` at once and yields
    to the loop. Fits code with a single sleeper (the emulator's scheduler loop) driven by a test."""

    def __init__(self, start_s: float = 0.0, epoch_s: float = 1_700_000_000.0) -> None:
        self.now_s = start_s
        self._epoch_s = epoch_s

    def monotonic(self) -> float:
        return self.now_s

    def time(self) -> float:
        return self._epoch_s + self.now_s

    async def sleep(self, seconds: float) -> None:
        self.now_s += max(0.0, seconds)
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        self.now_s += seconds
