"""Interruption notices: the cloud's (the provider polls its metadata service or its own API) and
the replica backend's (a Kubernetes node showing the signs of being reclaimed), one per node.

A new notice is announced to the scheduler (``SPOT_INTERRUPTION`` for the pool and for each replica
on the node, with the deadline) and the replicas on the node are drained so they stop
``margin_s`` before the node goes. A notice is acted on once, however many sources report it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from meridian.fleet import models

from agents import backends, nodes
from agents.providers import base as provider_base
from agents.providers.errors import CloudError

log = logging.getLogger(__name__)


class Interruptions:
    """The notices in effect and the drains they started. ``emit`` raises an event;
    ``on_cloud_error`` reports a failed provider poll (the last good answer is kept meanwhile, so
    a flaky metadata service does not make a notice vanish and come back as a new one)."""

    def __init__(self, cluster_id: str, *, provider: provider_base.Provider, backend: backends.ReplicaBackend,
                 emit: Callable[[models.Event], None], on_cloud_error: Callable[[CloudError], None],
                 on_change: Callable[[], None], clock: Callable[[], float], margin_s: float):
        self._cluster_id = cluster_id
        self._provider = provider
        self._backend = backend
        self._emit = emit
        self._on_cloud_error = on_cloud_error
        self._on_change = on_change
        self._clock = clock
        self._margin_s = margin_s
        self._provider_notices: list[provider_base.Interruption] = []
        self.notices: dict[str, provider_base.Interruption] = {}
        self._drains: set[asyncio.Task] = set()

    def noticed_nodes(self) -> frozenset[str]:
        return frozenset(n.node_id for n in self.notices.values() if n.node_id)

    async def poll_once(self) -> None:
        try:
            self._provider_notices = list(await self._provider.interruptions())
        except CloudError as exc:
            self._on_cloud_error(exc.with_pool(exc.pool_id, exc.operation or "interruptions"))
        merged = nodes.merge_notices(self._provider_notices, self._backend.interruptions(), self._backend.node_views())
        self.apply(merged)

    def apply(self, current: dict[str, provider_base.Interruption]) -> None:
        """Act on the notices new in ``current`` (keyed by ``nodes.notice_key``); forget the ended."""
        for key, notice in current.items():
            if key in self.notices:
                self.notices[key] = notice  # a later source may bring an earlier deadline: show it
                continue
            self.notices[key] = notice
            log.warning("interruption notice cluster=%s pool=%s node=%s deadline=%.0f", self._cluster_id,
                        notice.pool_id, notice.node_id, notice.deadline)
            self._emit(models.Event(models.EventKind.SPOT_INTERRUPTION, pool_id=notice.pool_id, message=notice.message,
                                    deadline=notice.deadline))
            drain_s = max(0.0, notice.deadline - self._clock() - self._margin_s)
            for m in self._backend.all():
                p = m.placement
                on_node = notice.node_id is None or p.node_id == notice.node_id
                if p.pool_id == notice.pool_id and on_node and m.state in backends.LIVE_STATES \
                        and m.state != models.ReplicaState.DRAINING:
                    self._emit(models.Event(models.EventKind.SPOT_INTERRUPTION, pool_id=notice.pool_id,
                                            replica_id=p.replica_id, message=notice.message, deadline=notice.deadline))
                    task = asyncio.create_task(self._drain(p.replica_id, drain_s), name=f"notice-drain-{p.replica_id}")
                    self._drains.add(task)
                    task.add_done_callback(self._drains.discard)
        for key in set(self.notices) - set(current):
            del self.notices[key]
        self._on_change()

    async def _drain(self, replica_id: str, deadline_s: float) -> None:
        try:
            await self._backend.drain(replica_id, deadline_s)
        except Exception:  # one failed drain must not stop the others; logged, the replica reports its state
            log.exception("drain on interruption failed replica=%s", replica_id)
        self._on_change()

    async def run(self, poll_s: float) -> None:
        while True:
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in a provider or backend must not stop the agent
                log.exception("interruption poll failed cluster=%s", self._cluster_id)
            await asyncio.sleep(poll_s)

    async def close(self) -> None:
        for task in list(self._drains):
            task.cancel()
        await asyncio.gather(*self._drains, return_exceptions=True)


__all__ = ["Interruptions"]
