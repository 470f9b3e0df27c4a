"""The state store contract runs against every backend: SQLite (a temp file) and a real Redis."""

from __future__ import annotations

import pytest

from scheduler import clock as clock_mod
from scheduler import state


@pytest.fixture(params=["sqlite", "redis"])
async def open_store(request, tmp_path):
    """A factory of stores on this test's backend, one per namespace; all closed afterwards."""
    url = f"sqlite://{tmp_path}/state.db" if request.param == "sqlite" else request.getfixturevalue("redis_url")
    opened: list[state.StateStore] = []

    def make(namespace: str = "t") -> state.StateStore:
        s = state.open_store(url, namespace=namespace, clock=clock_mod.SystemClock())
        opened.append(s)
        return s

    try:
        yield make
    finally:
        for s in opened:
            await s.close()


@pytest.fixture
def store(open_store) -> state.StateStore:
    return open_store()
