"""The state store contract runs against every backend: SQLite (a temp file) and a real Redis."""

from __future__ import annotations

import pytest

from scheduler import clock as clock_mod
from scheduler import state


@pytest.fixture(params=["sqlite", "redis"])
async def store(request, tmp_path):
    if request.param == "sqlite":
        s = state.open_store(f"sqlite://{tmp_path}/state.db", namespace="t", clock=clock_mod.SystemClock())
    else:
        s = state.open_store(request.getfixturevalue("redis_url"), namespace="t")
    try:
        yield s
    finally:
        await s.close()
