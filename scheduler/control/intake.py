"""The control side of the agent stream (the gRPC edge's ``AgentSink``): agent messages update the
fleet view, the directive log and the event tracker, and wake the control loop when something calls
for action now.

An agent may only speak for its own cluster (every refusal is logged and counted in
``auth_failures_total{surface="agent"}`` by reason):
- a replica report or an event naming a replica that another cluster holds (or that an open
  directive started on another cluster) is dropped (``foreign_replica``), so no agent can take over,
  or doom with a spot notice, another cluster's replica;
- an inventory pool whose id could name another cluster's pool (empty, with a ``/``, too long) is
  dropped (``bad_pool_id``): pools are keyed ``cluster/pool``; so is one whose figures no plan can
  use (a price that is negative, NaN or infinite; no GPUs per node) (``bad_pool``), which would
  otherwise stop every plan of the fleet;
- an ack, or a Hello's completed id, of another cluster's directive is ignored (``foreign_ack``,
  see the executor)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from meridian import limits
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

    def _foreign_owner(self, cluster_id: str, replica_id: str) -> str | None:
        """The other cluster that holds ``replica_id`` (or that an open directive starts it on), or None."""
        owner = self._fleet.cluster_of_replica(replica_id)
        if owner not in (None, cluster_id):
            return owner
        for od in self._executor.open_directives():
            if (isinstance(od.directive.action, fm.StartReplica) and od.cluster_id != cluster_id
                    and od.directive.action.replica_id == replica_id):
                return od.cluster_id
        return None

    def _refuse(self, reason: str, cluster_id: str, what: str, detail: str) -> None:
        self._metrics.auth_failures.labels("agent", reason).inc()
        log.warning("event=report_refused reason=%s cluster=%s %s detail=%r", reason, cluster_id, what, detail)

    async def on_inventory(self, cluster_id: str, pools: list[fm.GpuPool], complete: bool, now_s: float) -> None:
        if not self._fleet.knows(cluster_id):
            fleet_mod.unknown(cluster_id, "inventory")  # a stream of an ended term: no stock-outs, no wake-up
            return
        good = []
        for pool in pools:
            pid = pool.pool_id
            if not pid or "/" in pid or len(pid) > limits.MAX_ID_CHARS:
                self._refuse("bad_pool_id", cluster_id, f"pool={pid[:64]!r}",
                             f"a pool id is 1-{limits.MAX_ID_CHARS} characters without '/'")
                continue
            price = pool.price_per_node_hour_usd
            if not math.isfinite(price) or price < 0 or pool.gpus_per_node <= 0:
                self._refuse("bad_pool", cluster_id, f"pool={pid}",
                             f"price_per_node_hour_usd {price!r} (a finite number >= 0) and gpus_per_node "
                             f"{pool.gpus_per_node} (> 0) are needed to plan with a pool")
                continue
            good.append(pool)
        pools = good
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
        if not self._fleet.knows(cluster_id):
            fleet_mod.unknown(cluster_id, "replica report")
            return
        starts_elsewhere = {od.directive.action.replica_id: od.cluster_id for od in self._executor.open_directives()
                            if isinstance(od.directive.action, fm.StartReplica) and od.cluster_id != cluster_id}
        mine = []
        for r in reports:
            owner = self._fleet.cluster_of_replica(r.replica_id)
            if owner not in (None, cluster_id) or r.replica_id in starts_elsewhere:
                owner = owner if owner not in (None, cluster_id) else starts_elsewhere[r.replica_id]
                self._refuse("foreign_replica", cluster_id, f"replica={r.replica_id}",
                             f"replica {r.replica_id!r} belongs to cluster {owner!r}; an agent reports only its own")
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
        owner = self._foreign_owner(cluster_id, event.replica_id) if event.replica_id else None
        if owner is not None:
            self._refuse("foreign_replica", cluster_id, f"event={event.kind.value} replica={event.replica_id}",
                         f"replica {event.replica_id!r} belongs to cluster {owner!r}; an agent's events name only "
                         "its own replicas")
            return
        if event.pool_id and ("/" in event.pool_id or len(event.pool_id) > limits.MAX_ID_CHARS):
            self._refuse("bad_pool_id", cluster_id, f"event={event.kind.value} pool={event.pool_id[:64]!r}",
                         f"a pool id is 1-{limits.MAX_ID_CHARS} characters without '/'")
            return
        if self._events.on_event(cluster_id, event, now_s):
            self._wake(f"{event.kind.value} on {cluster_id}")

    async def on_heartbeat(self, cluster_id: str, now_s: float) -> None:
        self._fleet.seen(cluster_id, now_s)

    async def on_disconnect(self, cluster_id: str, now_s: float) -> None:
        self._fleet.disconnect(cluster_id, now_s)
