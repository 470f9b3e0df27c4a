"""meridian.waits: event_set, a timed wait on an event that never swallows its caller's cancellation; cancelled,
which stops a background task."""

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


async def test_cancelled_stops_a_loop_and_passes_on_another_failure():
    """A background loop is stopped and waited for; a task that fails on its way out says so."""
    ticks = []

    async def loop() -> None:
        while True:
            ticks.append(1)
            await asyncio.sleep(0.001)

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.01)
    await waits.cancelled(task)
    assert task.done() and task.cancelled() and ticks

    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    bad = asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await waits.cancelled(bad)


async def test_cancelled_lets_its_callers_own_cancellation_through():
    """A stop cancelled while it waits for a slow-ending task ends with that cancellation (it used
    to be taken for the task's and swallowed, so a cancelled stop ran on); a stop made by a task
    cancelled earlier, in its finally, still stops the loop and goes on."""
    ending = asyncio.Event()

    async def slow_to_end() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await ending.wait()  # cleanup that takes a while
            raise

    async def stop(task: asyncio.Task) -> str:
        await waits.cancelled(task)
        return "went on"

    loop_task = asyncio.create_task(slow_to_end())
    await asyncio.sleep(0)
    stopper = asyncio.create_task(stop(loop_task))
    await asyncio.sleep(0.01)  # the stopper now waits for the loop's cleanup
    stopper.cancel()
    await asyncio.sleep(0)
    ending.set()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert loop_task.cancelled()

    async def loop() -> None:
        while True:
            await asyncio.sleep(0.001)

    async def worker(background: asyncio.Task) -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await waits.cancelled(background)  # shutting down after a cancel: not re-raised here
            return "stopped its loop"
        return "not cancelled"

    background = asyncio.create_task(loop())
    owner = asyncio.create_task(worker(background))
    await asyncio.sleep(0.01)
    owner.cancel()
    assert await owner == "stopped its loop"
    assert background.cancelled()
