"""Leader election by a lease with a fencing token.

Every scheduler node runs a ``LeaderElector``. A standby tries to take the lease every
``poll_interval_s``; the leader renews it every ``renew_interval_s``. The lease lapses ``ttl_s`` after
the last renewal, so a standby takes over at most ``ttl_s + poll_interval_s`` after a leader dies.

The leader believes in its lease only until ``ttl_s x safety`` after the start of its last successful
renewal (its local view expires before the store's), and every directive is additionally claimed
with a fenced write, so a leader cut off from the store cannot act after a successor took over."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from scheduler import clock as clock_mod
from scheduler.state import base

log = logging.getLogger("meridian.scheduler.election")

Callback = Callable[[base.Lease], Awaitable[None]]


class LeaderElector:
    SAFETY = 0.8

    def __init__(self, store: base.StateStore, holder: str, *, ttl_s: float, renew_interval_s: float,
                 poll_interval_s: float, clock: clock_mod.Clock | None = None,
                 meta: Mapping[str, str] | None = None, on_elected: Callback | None = None,
                 on_deposed: Callback | None = None, on_error: Callable[[str], None] | None = None):
        if renew_interval_s * 2 > ttl_s:
            raise ValueError(f"renew_interval_s ({renew_interval_s}) must be at most half of ttl_s ({ttl_s})")
        self._store = store
        self._on_error = on_error or (lambda where: None)  # where: lease_acquire, lease_renew, lease_release
        self.holder = holder
        self._ttl_s = ttl_s
        self._renew_s = renew_interval_s
        self._poll_s = poll_interval_s
        self._clock = clock or clock_mod.SystemClock()
        self.meta = dict(meta or {})
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._lease: base.Lease | None = None
        self._valid_until = 0.0
        self._stopped = asyncio.Event()

    @property
    def lease(self) -> base.Lease | None:
        """The lease while this node leads and its local view of it is still valid."""
        if self._lease is not None and self._clock.now() < self._valid_until:
            return self._lease
        return None

    @property
    def is_leader(self) -> bool:
        return self.lease is not None

    @property
    def token(self) -> int:
        lease = self.lease
        return lease.token if lease else 0

    async def step(self) -> None:
        """One election round: renew if leading, else try to acquire. Store errors are logged; a
        leader that cannot renew before its local deadline steps down."""
        started = self._clock.now()
        if self._lease is None:
            try:
                got = await self._store.acquire_lease(self.holder, self._ttl_s, self.meta)
            except base.StateError as exc:
                log.warning("event=lease_acquire_error holder=%s error=%r", self.holder, str(exc))
                self._on_error("lease_acquire")
                return
            if got is not None:
                self._lease = got
                self._valid_until = started + self._ttl_s * self.SAFETY
                log.info("event=elected holder=%s token=%d", self.holder, got.token)
                if self._on_elected is not None:
                    await self._on_elected(got)
            return
        lease = self._lease
        try:
            ok = await self._store.renew_lease(self.holder, lease.token, self._ttl_s)
        except base.StateError as exc:
            log.warning("event=lease_renew_error holder=%s token=%d error=%r", self.holder, lease.token, str(exc))
            self._on_error("lease_renew")
            ok = None
        if ok:
            self._valid_until = started + self._ttl_s * self.SAFETY
        elif ok is False or self._clock.now() >= self._valid_until:
            await self._depose(lease, "lease lost" if ok is False else "cannot reach the store")

    async def _depose(self, lease: base.Lease, why: str) -> None:
        self._lease = None
        self._valid_until = 0.0
        log.warning("event=deposed holder=%s token=%d reason=%r", self.holder, lease.token, why)
        if self._on_deposed is not None:
            await self._on_deposed(lease)

    async def run(self) -> None:
        while not self._stopped.is_set():
            await self.step()
            await self._clock.sleep(self._renew_s if self._lease is not None else self._poll_s)

    async def resign(self) -> None:
        """Stop and give the lease up at once (clean shutdown), so a standby need not wait for the TTL.

        The node stands down first and releases the lease after: nothing is done under a lease
        about to go, and a release the store never answers (cut short by the caller) leaves the
        node stood down all the same."""
        self._stopped.set()
        lease = self._lease
        if lease is None:
            return
        await self._depose(lease, "resigned")
        try:
            await self._store.release_lease(self.holder, lease.token)
        except base.StateError as exc:
            log.warning("event=lease_release_error holder=%s error=%r", self.holder, str(exc))
            self._on_error("lease_release")
