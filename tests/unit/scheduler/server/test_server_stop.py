"""Shutdown of the scheduler service: no step can keep it from finishing."""

from __future__ import annotations

import asyncio
import logging

from scheduler import service


async def test_a_step_that_will_not_stop_is_named_and_left_behind(make_service, monkeypatch, caplog):
    """A task of the service that ignores its cancellation (as a stuck dependency would) costs
    stop() at most STOP_STEP_S: stop() finishes, logs which task overran and counts it, instead
    of waiting for ever."""
    monkeypatch.setattr(service, "STOP_STEP_S", 0.3)
    svc = await make_service()
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # swallows the cancel: never finishes until released

    task = asyncio.create_task(stubborn(), name="stubborn")
    svc._tasks.append(task)
    try:
        with caplog.at_level(logging.WARNING, logger="meridian.scheduler.service"):
            await asyncio.wait_for(svc.stop(grace_s=0.1), timeout=5.0)
        assert any("event=stop_overran" in r.getMessage() and "stubborn" in r.getMessage() for r in caplog.records)
        assert svc.metrics.errors.labels("stop_overran")._value.get() == 1
        assert not task.done()
    finally:
        release.set()
        await task
