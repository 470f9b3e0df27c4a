"""The control side of the agent stream (the gRPC edge's ``AgentSink``): agent messages update the
fleet view, the directive log and the event tracker, and wake the control loop when something calls
for action now.

An agent may only speak for its own cluster: a replica report naming a replica that another
cluster holds (or that an open directive started on another cluster) is dropped, logged and
counted; so is an ack for another cluster's directive (see the executor)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from meridian.fleet import models as fm
from scheduler import metrics as metrics_mod
from scheduler.control import events as events_mod
from scheduler.control import fleet as fleet_mod
from scheduler.reconciler import executor as executor_mod
from scheduler.solver import problem
from scheduler.state import base

log = logging.getLogger("meridian.scheduler.intake")


class Intake:
    def __init__(self, *, fleet: fleet_mod.FleetView, executor: executor_mod.Executor,
                 events: events_mod.EventTracker, metrics: metrics_mod.SchedulerMetrics,
                 fence: Callable[[], int], wake: Callable[[str], None], on_fenced: Callable[[], None]):
        self._fleet = fleet
        self._executor = executor
        self._events = events
        self._metrics = metrics
        self._fence = fence
        self._wake = wake
        self._on_fenced = on_fenced

    async def _guard(self, coro) -> None:
        try:
            await coro
        except base.FencedOut:
            log.warning("event=fenced_out: this node no longer holds the lease")
            self._on_fenced()
        except base.StateError as exc:
            self._metrics.errors.labels("state").inc()
            log.error("event=state_error where=intake error=%r", str(exc))

    async def on_hello(self, identity: fm.ClusterIdentity, completed_ids: tuple[str, ...], now_s: float) -> None:
        self._fleet.connect(identity, now_s)
        if completed_ids:
            await self._guard(self._executor.on_completed(identity.cluster_id, completed_ids, self._fence()))
        self._wake(f"agent {identity.cluster_id} connected")

    async def on_inventory(self, cluster_id: str, pools: list[fm.GpuPool], complete: bool, now_s: float) -> None:
        old = self._fleet.pools_of(cluster_id)
        for pool in pools:
            key = problem.pool_key(cluster_id, pool.pool_id)
            prev = old.get(pool.pool_id)
            if pool.provisioning_state is fm.ProvisioningState.STOCKED_OUT and (
                    prev is None or prev.provisioning_state is not fm.ProvisioningState.STOCKED_OUT):
                self._events.stock_out(key, now_s, "pool reported stocked out")
                self._wake(f"pool {key} stocked out")
            elif prev is not None and pool.nodes_current > prev.nodes_current:
                self._events.pool_grew(key)
        version = self._fleet.version
        self._fleet.inventory(cluster_id, pools, complete, now_s)
        if self._fleet.version != version:
            self._wake(f"inventory of {cluster_id} changed")

    async def on_replicas(self, cluster_id: str, reports: list[fm.ReplicaReport], complete: bool,
                          now_s: float) -> None:
        starts_elsewhere = {od.directive.action.replica_id: od.cluster_id for od in self._executor.open_directives()
                            if isinstance(od.directive.action, fm.StartReplica) and od.cluster_id != cluster_id}
        mine = []
        for r in reports:
            owner = self._fleet.cluster_of_replica(r.replica_id)
            if owner not in (None, cluster_id) or r.replica_id in starts_elsewhere:
                owner = owner if owner not in (None, cluster_id) else starts_elsewhere[r.replica_id]
                self._metrics.auth_failures.labels("agent", "foreign_replica").inc()
                log.warning("event=report_refused cluster=%s replica=%s owner=%s: an agent cannot report for another "
                            "cluster", cluster_id, r.replica_id, owner)
                continue
            mine.append(r)
        version = self._fleet.version
        self._fleet.report(cluster_id, mine, complete, now_s)
        if self._fleet.version != version:
            self._wake(f"replicas of {cluster_id} changed")

    async def on_ack(self, cluster_id: str, ack: fm.DirectiveAck, now_s: float) -> None:
        self._fleet.seen(cluster_id, now_s)
        await self._guard(self._executor.on_ack(cluster_id, ack, self._fence()))
        if ack.outcome in (fm.DirectiveOutcome.REFUSED, fm.DirectiveOutcome.FAILED):
            self._wake(f"directive {ack.directive_id} {ack.outcome.value}")

    async def on_event(self, cluster_id: str, event: fm.Event, now_s: float) -> None:
        self._fleet.seen(cluster_id, now_s)
        if self._events.on_event(cluster_id, event, now_s):
            self._wake(f"{event.kind.value} on {cluster_id}")

    async def on_heartbeat(self, cluster_id: str, now_s: float) -> None:
        self._fleet.seen(cluster_id, now_s)

    async def on_disconnect(self, cluster_id: str, now_s: float) -> None:
        self._fleet.disconnect(cluster_id, now_s)
