"""Overload protection: a bounded queue per served model.

At most ``limit()`` requests of a model are in flight through this router; the next
``queue_size`` wait (first come, first served) up to ``queue_timeout_s``, or less when the request's
own deadline comes first (then 504 ``deadline_exceeded``, as past the deadline anywhere else);
beyond that a request is refused at once with 429 and a Retry-After, instead of piling up latency
for everyone."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from router import errors


class Admission:
    __slots__ = ("model", "limit", "queue_size", "queue_timeout_s", "in_flight", "_waiters")

    def __init__(self, model: str, limit: Callable[[], int], queue_size: int, queue_timeout_s: float):
        self.model = model
        self.limit = limit
        self.queue_size = queue_size
        self.queue_timeout_s = queue_timeout_s
        self.in_flight = 0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def try_enter(self) -> bool:
        """Take a slot if one is free and nobody is queued ahead (no await: the hot path)."""
        if self.in_flight < self.limit() and not self._waiters:
            self.in_flight += 1
            return True
        return False

    async def enter(self, deadline_in_s: float | None = None, timeout_s: float = 0.0) -> None:
        """Take a slot, queueing if needed; raise ApiError 429 when the queue is full or the wait
        exceeds ``queue_timeout_s``, and 504 when the request's own deadline (``deadline_in_s``
        from now; ``timeout_s`` the whole deadline, for the message) comes first."""
        if self.try_enter():
            return
        if len(self._waiters) >= self.queue_size:
            raise errors.overloaded(self.model, retry_after_s=1.0)
        wait_s = self.queue_timeout_s
        deadline_first = deadline_in_s is not None and deadline_in_s < wait_s
        if deadline_first:
            if deadline_in_s <= 0:
                raise errors.deadline_exceeded(self.model, timeout_s)
            wait_s = deadline_in_s
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), wait_s)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            if waiter.done() and not waiter.cancelled():
                self.leave()  # the slot was handed over just as we gave up: pass it on
            else:
                waiter.cancel()
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            if isinstance(exc, asyncio.TimeoutError):
                if deadline_first:
                    raise errors.deadline_exceeded(self.model, timeout_s) from None
                raise errors.overloaded(self.model, retry_after_s=self.queue_timeout_s) from None
            raise

    def leave(self) -> None:
        """Give a slot back; hands it to the oldest live waiter, if any."""
        self.in_flight -= 1
        waiters = self._waiters
        while waiters and self.in_flight < self.limit():
            waiter = waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
                return
