"""Fixtures for the agent's integration tests: real local endpoints (moto in server mode as its
own process, the GKE and ARM fakes, a metadata fake, the test scheduler on gRPC loopback) and
helpers to build Cluster specs and in-process agents. Every server and process is stopped in the
fixture's finally."""

from __future__ import annotations

import pytest

from agents.testing import moto as moto_testing
from agents.testing import scheduler as test_scheduler


@pytest.fixture(scope="session")
def moto_url():
    """moto in server mode, a separate process on loopback, for the whole session."""
    server = moto_testing.MotoServer()
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
async def scheduler():
    """The test CapacityService server on a free loopback port."""
    sched = test_scheduler.TestScheduler({}, heartbeat_interval_s=1)
    await sched.start()
    try:
        yield sched
    finally:
        await sched.stop()
