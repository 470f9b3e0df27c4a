"""The bounded queue per model: slots, FIFO hand-over, queue full and queue timeout as 429."""

from __future__ import annotations

import asyncio

import pytest

from router import admission, errors


async def test_queue_hands_slots_over_in_order():
    """Waiters get freed slots first come, first served."""
    gate = admission.Admission("m", lambda: 1, queue_size=5, queue_timeout_s=5)
    assert gate.try_enter()
    order = []

    async def wait(name):
        await gate.enter()
        order.append(name)

    tasks = [asyncio.create_task(wait(n)) for n in ("a", "b")]
    await asyncio.sleep(0.01)
    assert gate.queued == 2
    gate.leave()
    await asyncio.sleep(0.01)
    gate.leave()
    await asyncio.gather(*tasks)
    assert order == ["a", "b"] and gate.in_flight == 1


async def test_full_queue_is_refused_with_retry_after():
    """Beyond the queue size a request gets 429 with a Retry-After at once."""
    gate = admission.Admission("m", lambda: 1, queue_size=0, queue_timeout_s=5)
    assert gate.try_enter()
    with pytest.raises(errors.ApiError) as info:
        await gate.enter()
    assert info.value.status == 429 and info.value.retry_after_s >= 1
    assert info.value.response().header("Retry-After") == "1"


async def test_queue_timeout_is_429_and_frees_the_place():
    """A waiter that times out is refused and leaves the queue."""
    gate = admission.Admission("m", lambda: 1, queue_size=3, queue_timeout_s=0.05)
    gate.try_enter()
    with pytest.raises(errors.ApiError) as info:
        await gate.enter()
    assert info.value.status == 429 and gate.queued == 0


async def test_cancelled_waiter_does_not_leak_a_slot():
    """A client that leaves while queued neither holds nor loses a slot."""
    gate = admission.Admission("m", lambda: 1, queue_size=3, queue_timeout_s=5)
    gate.try_enter()
    task = asyncio.create_task(gate.enter())
    await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.sleep(0.01)
    gate.leave()
    assert gate.in_flight == 0 and gate.queued == 0
    assert gate.try_enter()
