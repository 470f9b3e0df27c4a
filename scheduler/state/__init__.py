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

def _redis(url: str, namespace: str, clock: clock_mod.Clock | None, replica_acks: int | None) -> StateStore:
    return RedisStore.from_url(url, namespace=namespace, replica_acks=replica_acks)


BACKENDS: dict[str, Callable[..., StateStore]] = {
    "sqlite": lambda url, namespace, clock, replica_acks: SqliteStore.from_url(url, namespace=namespace, clock=clock),
    "redis": _redis,
    "rediss": _redis,
    "redis+sentinel": _redis,
    "rediss+sentinel": _redis,
}


def open_store(url: str, *, namespace: str = "default", clock: clock_mod.Clock | None = None,
               replica_acks: int | None = None) -> StateStore:
    """The store a ``state_url`` names: ``sqlite://PATH``, ``redis://HOST:PORT/DB`` or
    ``redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB]``. ``replica_acks``: replicas that must
    confirm each Redis write (None: 1 with Sentinel, else 0; see ``scheduler.state.redis``)."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    factory = BACKENDS.get(scheme)
    if factory is None:
        raise ValueError(f"state_url {url!r}: unknown scheme {scheme!r}; use one of: "
                         + ", ".join(f"{s}://" for s in BACKENDS))
    return factory(url, namespace, clock, replica_acks)


__all__ = ["BACKENDS", "Delete", "FencedOut", "Lease", "Put", "RedisStore", "SqliteStore", "StateError",
           "StateStore", "base", "election", "open_store", "records"]
