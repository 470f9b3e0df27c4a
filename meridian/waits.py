"""Waiting for an ``asyncio.Event`` with a timeout, without losing a cancellation; and stopping a
background task (``cancelled``).

``asyncio.wait_for(event.wait(), t)`` on Python 3.11 returns normally when the event is set in the
same loop step as the waiting task is cancelled (CPython gh-86296, fixed in 3.12's rewrite): the
cancellation is swallowed, and a loop that waits this way runs on after its owner cancelled it, so
a shutdown that sets a wake-up event and cancels the task waits for ever. ``asyncio.wait`` lets
the cancellation through; this is the one helper every such wait uses."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("meridian.waits")


async def event_set(event: asyncio.Event, timeout_s: float | None) -> bool:
    """True when ``event`` is set within ``timeout_s`` seconds (None: no limit), False when the time
    passed first. A cancellation of the caller always propagates."""
    if event.is_set():
        return True
    if timeout_s is not None and timeout_s <= 0:
        return False
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout_s)
    finally:
        waiter.cancel()
    return event.is_set()


async def cancelled(task: asyncio.Task) -> None:
    """Cancel ``task`` (a background loop) and wait until it has ended: its cancellation is how it
    is meant to end (logged at debug, ``event=task_stopped``); any other exception it ends with is
    raised here. A cancellation of the caller while it waits is its own, and propagates: both end
    in the same CancelledError, told apart by the caller's count of cancel requests
    (``Task.cancelling``), which only a cancellation of the caller during the wait raises. A
    caller cancelled before (a shutdown in a cancelled task's ``finally``) still stops ``task``
    and goes on."""
    caller = asyncio.current_task()
    before = caller.cancelling() if caller is not None else 0
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if caller is not None and caller.cancelling() > before:
            raise
        log.debug("event=task_stopped task=%s", task.get_name())
