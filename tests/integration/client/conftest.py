"""Fixtures for the client's integration tests: scripted fault servers, and the project's real
router in front of SGLang emulator replicas (the router's and the runtime adapter's own fixtures,
reused)."""

from __future__ import annotations

import pytest

from meridian import client as mc
from tests.integration.client import faults
from tests.integration.router.conftest import make_router  # noqa: F401  (fixture, reused)

# Small waits so the failure tests stay short; the limits under test are set per test.
FAST_RETRY = mc.RetryPolicy(max_attempts=3, backoff_initial_s=0.05, backoff_max_s=0.1)


@pytest.fixture
async def fault_server():
    """start(script, sock=None) -> a started FaultServer, stopped after the test."""
    started: list[faults.FaultServer] = []

    async def start(script: list[faults.Step], sock=None) -> faults.FaultServer:
        server = await faults.FaultServer(script).start(sock)
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop()


@pytest.fixture
async def clients():
    """make(base_url, **options) -> an AsyncClient with fast retries unless given, closed after."""
    made: list[mc.AsyncClient] = []

    def make(base_url: str, **options) -> mc.AsyncClient:
        options.setdefault("retry", FAST_RETRY)
        c = mc.AsyncClient(base_url, **options)
        made.append(c)
        return c

    yield make
    for c in made:
        await c.aclose()
