"""Scheduler nodes for the admin API tests (see tests/unit/scheduler/service_harness.py)."""

from __future__ import annotations

import pytest

from tests.unit.scheduler import service_harness


@pytest.fixture
async def make_service(tmp_path):
    async with service_harness.service_factory(tmp_path) as make:
        yield make
