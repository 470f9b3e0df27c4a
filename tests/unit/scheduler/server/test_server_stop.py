"""Shutdown of the scheduler service: no step can keep it from finishing."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from scheduler import service
from tests.unit.scheduler.service_harness import leading


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
            clean = await asyncio.wait_for(svc.stop(grace_s=0.1), timeout=5.0)
        assert clean is False  # the caller exits at once: asyncio would wait for the task at exit
        assert any("event=stop_overran" in r.getMessage() and "stubborn" in r.getMessage() for r in caplog.records)
        assert svc.metrics.errors.labels("stop_overran")._value.get() == 1
        assert not task.done()
    finally:
        release.set()
        await task


async def test_a_step_that_hangs_or_fails_does_not_stop_the_others(make_service, monkeypatch, caplog):
    """The admin HTTP server's cleanup never returning (and ignoring its cancellation), and the
    store's close failing: each is logged by name, the other steps still run, and stop() says it
    did not stop cleanly; a service whose steps all finish stops cleanly."""
    monkeypatch.setattr(service, "STOP_STEP_S", 0.3)
    clean_svc = await make_service()
    assert await clean_svc.stop(grace_s=0.1) is True

    svc = await make_service()
    release = asyncio.Event()
    closed_grpc = []

    real_cleanup = web.AppRunner.cleanup

    async def cleanup_forever(runner) -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    async def close_fails() -> None:
        raise OSError("connection reset while closing")

    grpc_stop = svc._grpc.stop

    async def grpc_stop_seen(grace):
        closed_grpc.append(grace)
        return await grpc_stop(grace)

    monkeypatch.setattr(web.AppRunner, "cleanup", cleanup_forever)
    monkeypatch.setattr(svc.store, "close", close_fails)
    monkeypatch.setattr(svc._grpc, "stop", grpc_stop_seen)
    try:
        with caplog.at_level(logging.WARNING, logger="meridian.scheduler.service"):
            clean = await asyncio.wait_for(svc.stop(grace_s=0.1), timeout=5.0)
        messages = [r.getMessage() for r in caplog.records]
        assert clean is False and closed_grpc == [0.1]
        assert any("event=stop_overran" in m and "admin_http" in m for m in messages)
        assert any("event=stop_failed" in m and "store" in m and "connection reset" in m for m in messages)
        assert svc.metrics.errors.labels("stop_failed")._value.get() == 1
    finally:
        release.set()
        await real_cleanup(svc._runner)  # the admin port the stand-in kept open


async def test_a_store_that_never_answers_the_lease_release_does_not_hold_the_shutdown(make_service, monkeypatch,
                                                                                     caplog):
    """A leader whose store accepts the lease's release and never answers (a hung Redis) stops
    within STOP_STEP_S of it: the resign is logged by name as overrun, the node has stood down all
    the same, the later steps still run (the store is closed) and stop() says it did not stop
    cleanly."""
    monkeypatch.setattr(service, "STOP_STEP_S", 0.3)
    svc = await leading(await make_service())
    release = asyncio.Event()
    closed = []

    async def never_answers(holder, token) -> None:
        await release.wait()

    real_close = svc.store.close

    async def close_seen() -> None:
        closed.append(True)
        await real_close()

    monkeypatch.setattr(svc.store, "release_lease", never_answers)
    monkeypatch.setattr(svc.store, "close", close_seen)
    try:
        with caplog.at_level(logging.WARNING, logger="meridian.scheduler.service"):
            clean = await asyncio.wait_for(svc.stop(grace_s=0.1), timeout=5.0)
        assert clean is False
        assert any("event=stop_overran" in r.getMessage() and "'resign'" in r.getMessage() for r in caplog.records)
        assert closed == [True]
        # It stood down before asking the store: no token, not counted as the leader.
        assert svc.token == 0 and svc.metrics.is_leader._value.get() == 0
    finally:
        release.set()
