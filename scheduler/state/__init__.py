"""Scheduler state behind one small interface (``StateStore``): SQLite for one node, Redis for HA.
``open_store(url)`` picks the backend by URL scheme; ``records`` builds specs, the directive log,
traffic and routing versions on the primitives; ``election`` runs the leader lease."""

from __future__ import annotations

from collections.abc import Callable

from scheduler import clock as clock_mod
from scheduler.state import base, election, records
from scheduler.state.base import Delete, FencedOut, Lease, Put, StateError, StateStore
from scheduler.state.redis import RedisStore
from scheduler.state.sqlite import SqliteStore

BACKENDS: dict[str, Callable[..., StateStore]] = {
    "sqlite": lambda url, namespace, clock: SqliteStore.from_url(url, namespace=namespace, clock=clock),
    "redis": lambda url, namespace, clock: RedisStore.from_url(url, namespace=namespace),
    "rediss": lambda url, namespace, clock: RedisStore.from_url(url, namespace=namespace),
}


def open_store(url: str, *, namespace: str = "default", clock: clock_mod.Clock | None = None) -> StateStore:
    """The store a ``state_url`` names: ``sqlite://PATH`` or ``redis://HOST:PORT/DB``."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    factory = BACKENDS.get(scheme)
    if factory is None:
        raise ValueError(f"state_url {url!r}: unknown scheme {scheme!r}; use one of: "
                         + ", ".join(f"{s}://" for s in BACKENDS))
    return factory(url, namespace, clock)


__all__ = ["BACKENDS", "Delete", "FencedOut", "Lease", "Put", "RedisStore", "SqliteStore", "StateError",
           "StateStore", "base", "election", "open_store", "records"]
