"""Scheduler nodes for the gRPC edge tests (see tests/unit/scheduler/service_harness.py)."""

from __future__ import annotations

import pytest

from tests.unit.scheduler import service_harness


@pytest.fixture
async def make_service(tmp_path):
    # The gRPC edge is under test here, not the reconciler: shadow mode (no directives), no grace.
    async with service_harness.service_factory(tmp_path, directives_enabled=False, adopt_grace_s=0.0) as make:
        yield make
