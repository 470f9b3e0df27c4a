"""What the agent has to tell the scheduler, waiting for the stream to carry it.

Acknowledgements and events are queued (bounded: when the scheduler is unreachable for long, the
oldest are dropped; Hello's completed directive ids and the next complete reports make up for
them). Inventory and replica reports are state, not history: only the latest snapshot is kept and
sent when it changed, or when a periodic refresh is due."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging

from meridian.fleet import models
from meridian import waits

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Batch:
    """What to send now. ``inventory``/``replicas`` are None when unchanged."""

    acks: tuple[models.DirectiveAck, ...] = ()
    events: tuple[models.Event, ...] = ()
    inventory: tuple[models.GpuPool, ...] | None = None
    replicas: tuple[models.ReplicaReport, ...] | None = None

    def __bool__(self) -> bool:
        return bool(self.acks or self.events or self.inventory is not None or self.replicas is not None)


def _significant(r: models.ReplicaReport) -> tuple:
    """The fields whose change must reach the scheduler at once (load waits for the next refresh)."""
    return (r.replica_id, r.state, r.endpoint, r.restarts, r.message, r.revision, r.pool_id)


class Outbox:
    def __init__(self, max_pending: int = 1024):
        self._pending: collections.deque[models.DirectiveAck | models.Event] = collections.deque(maxlen=max_pending)
        self._inventory: tuple[models.GpuPool, ...] = ()
        self._replicas: tuple[models.ReplicaReport, ...] = ()
        self._inventory_dirty = False
        self._replicas_dirty = False
        self._wake = asyncio.Event()
        self.dropped = 0

    def _push(self, item: models.DirectiveAck | models.Event) -> None:
        if len(self._pending) == self._pending.maxlen:
            self.dropped += 1
            log.warning("outbox full: dropping oldest pending message dropped_total=%d", self.dropped)
        self._pending.append(item)
        self._wake.set()

    def put_ack(self, ack: models.DirectiveAck) -> None:
        self._push(ack)

    def put_event(self, event: models.Event) -> None:
        self._push(event)

    def set_inventory(self, pools: list[models.GpuPool] | tuple[models.GpuPool, ...]) -> bool:
        """Store the latest inventory; returns True (and wakes the sender) when it changed."""
        pools = tuple(sorted(pools, key=lambda p: p.pool_id))
        if pools == self._inventory:
            return False
        self._inventory = pools
        self._inventory_dirty = True
        self._wake.set()
        return True

    def set_replicas(self, reports: list[models.ReplicaReport] | tuple[models.ReplicaReport, ...],
                     refresh: bool = False) -> bool:
        """Store the latest replica reports. They are sent at once when a significant field changed
        (state, endpoint, restarts ...), or when ``refresh`` (the periodic load report) is set."""
        reports = tuple(sorted(reports, key=lambda r: r.replica_id))
        changed = [_significant(r) for r in reports] != [_significant(r) for r in self._replicas]
        self._replicas = reports
        if changed or refresh:
            self._replicas_dirty = True
            self._wake.set()
        return changed

    def mark_all_dirty(self) -> None:
        """After (re)connecting: the next batch carries complete inventory and reports."""
        self._inventory_dirty = True
        self._replicas_dirty = True
        self._wake.set()

    @property
    def inventory(self) -> tuple[models.GpuPool, ...]:
        return self._inventory

    @property
    def replicas(self) -> tuple[models.ReplicaReport, ...]:
        return self._replicas

    async def wait(self, timeout_s: float) -> bool:
        """Wait until something is to be sent or ``timeout_s`` passes; True when woken."""
        return await waits.event_set(self._wake, timeout_s)

    def take(self) -> Batch:
        """Everything due now; pending acks/events leave the queue (requeue them with ``requeue`` if
        the send fails)."""
        self._wake.clear()
        items = list(self._pending)
        self._pending.clear()
        batch = Batch(
            acks=tuple(i for i in items if isinstance(i, models.DirectiveAck)),
            events=tuple(i for i in items if isinstance(i, models.Event)),
            inventory=self._inventory if self._inventory_dirty else None,
            replicas=self._replicas if self._replicas_dirty else None,
        )
        self._inventory_dirty = False
        self._replicas_dirty = False
        return batch

    def requeue(self, batch: Batch) -> None:
        """Put back a batch that could not be sent (oldest first, ahead of newer items)."""
        for item in reversed((*batch.acks, *batch.events)):
            if len(self._pending) < (self._pending.maxlen or 0):
                self._pending.appendleft(item)
        if batch.inventory is not None:
            self._inventory_dirty = True
        if batch.replicas is not None:
            self._replicas_dirty = True
