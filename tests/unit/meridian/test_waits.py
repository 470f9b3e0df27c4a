"""meridian.waits.event_set: a timed wait on an event that never swallows its caller's cancellation."""

from __future__ import annotations

import asyncio

import pytest

from meridian import waits


async def _loop_until_cancelled(event: asyncio.Event, wait) -> int:
    rounds = 0
    while True:  # the shape of every waiting loop: wake on the event or after the interval
        await wait(event, 10.0)
        event.clear()
        rounds += 1


async def test_a_cancel_in_the_same_step_as_the_set_ends_the_waiting_loop():
    """Setting the wake-up event and cancelling the task at once (what a shutdown does) ends the loop,
    every time: with asyncio.wait_for on Python 3.11 the cancellation could be lost and the loop ran on."""
    for _ in range(50):
        event = asyncio.Event()
        task = asyncio.create_task(_loop_until_cancelled(event, waits.event_set))
        await asyncio.sleep(0)  # the task now waits on the event
        event.set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 2.0)


async def test_set_times_out_and_already_set():
    """True when set within the time (or set already), False when the time passes first."""
    event = asyncio.Event()
    assert await waits.event_set(event, 0.01) is False
    assert await waits.event_set(event, 0) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await waits.event_set(event, 5.0) is True
    assert await waits.event_set(event, 0) is True
