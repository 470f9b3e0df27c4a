"""The scheduler's one state interface: a few collections of string values, atomic multi-key writes,
counters and a leader lease with a fencing token. Everything the scheduler persists (specs, directive
log, routing version, traffic) is built on these primitives in ``scheduler.state.records``, so each
backend stays small and one contract test suite covers them all.

Fencing: a write or insert given ``fence=token`` happens only if the lease is currently held with
that token, checked atomically with the write inside the store. A deposed leader (its lease expired
and taken over) therefore cannot record or send another directive, even if it has not noticed yet."""

from __future__ import annotations

import abc
import dataclasses
import json
from collections.abc import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class Put:
    collection: str
    key: str
    value: str


@dataclasses.dataclass(frozen=True)
class Delete:
    collection: str
    key: str


Op = Put | Delete


@dataclasses.dataclass(frozen=True)
class Lease:
    """The leader lease: who holds it, the fencing token of that term, when it lapses unless renewed
    (Unix seconds; approximate for Redis, where the server keeps the TTL), and the holder's addresses."""

    holder: str
    token: int
    expires_at: float
    meta: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def encode(self) -> str:
        return json.dumps({"holder": self.holder, "token": str(self.token), "meta": dict(self.meta)})


class StateError(RuntimeError):
    """The store could not be reached or answered wrongly; callers retry or step down."""


class FencedOut(StateError):
    """A fenced write was refused: the lease is not held with the given token any more."""


class StateStore(abc.ABC):
    """Backends: ``scheduler.state.sqlite.SqliteStore`` (one node) and ``scheduler.state.redis.RedisStore``
    (HA). Collections and counters are namespaced per store instance."""

    @abc.abstractmethod
    async def get(self, collection: str, key: str) -> str | None: ...

    @abc.abstractmethod
    async def items(self, collection: str) -> dict[str, str]: ...

    @abc.abstractmethod
    async def write(self, ops: Sequence[Op], *, fence: int | None = None) -> None:
        """Apply every op or none; raise FencedOut when ``fence`` is given and not the lease's token."""

    @abc.abstractmethod
    async def insert(self, collection: str, key: str, value: str, *, fence: int | None = None) -> bool:
        """Store ``value`` only if ``key`` is absent; False if it was present. FencedOut as for write."""

    @abc.abstractmethod
    async def incr(self, counter: str) -> int:
        """Atomically add one to ``counter`` (absent: 0) and return the new value."""

    @abc.abstractmethod
    async def collections(self) -> list[str]:
        """Names of the collections that hold at least one key, sorted (what a backup must carry)."""

    @abc.abstractmethod
    async def counters(self) -> dict[str, int]:
        """Every counter and its current value (a counter never incremented is absent)."""

    @abc.abstractmethod
    async def raise_counters(self, values: Mapping[str, int]) -> None:
        """Atomically set each counter to the larger of its value and ``values[name]``: counters (fencing
        tokens, versions) only ever move up, also when a backup is restored."""

    @abc.abstractmethod
    async def acquire_lease(self, holder: str, ttl_s: float, meta: Mapping[str, str]) -> Lease | None:
        """Take the lease if free (with a new, higher fencing token) and return it; if ``holder`` already
        holds it, return it unchanged; if another holder does, None.

        A new term's token is the larger of the token counter plus one and the wall clock in
        milliseconds (``token_floor``), so tokens keep increasing even when the store itself is lost
        and starts empty: agents remember the highest token they saw and refuse lower ones."""

    @abc.abstractmethod
    async def renew_lease(self, holder: str, token: int, ttl_s: float) -> bool:
        """Extend the lease by ``ttl_s`` from now if still held by ``holder`` with ``token``."""

    @abc.abstractmethod
    async def release_lease(self, holder: str, token: int) -> None:
        """Give the lease up (only if held by ``holder`` with ``token``) so a standby takes over at once."""

    @abc.abstractmethod
    async def lease(self) -> Lease | None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...


def token_floor(now_s: float) -> int:
    """The lowest fencing token a term elected at ``now_s`` (Unix seconds) may get: its milliseconds."""
    return max(0, int(now_s * 1000))


def decode_lease(raw: str | bytes, expires_at: float) -> Lease:
    data = json.loads(raw)
    return Lease(str(data["holder"]), int(data["token"]), expires_at, dict(data.get("meta") or {}))
