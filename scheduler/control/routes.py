"""Routing tables from the fleet view: per served model, its READY replicas on live clusters (not
the ones being drained, nor those a rollout keeps out of traffic), with where they run and their
last load. Every routed replica has weight 1: during a canary the new revision's traffic share is
its share of the routed replicas.

``build_models`` is pure. ``RoutePublisher`` publishes a new version whenever the routes change
(replicas added, removed, moved between states) and, for load alone, at most every
``load_refresh_s``; the version comes from the shared store so it never goes back."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Mapping

from meridian.fleet import models as fm
from meridian.spec import deployment as deployment_spec
from scheduler import clock as clock_mod
from scheduler import metrics as metrics_mod
from scheduler.control import fleet as fleet_mod
from scheduler.server import routing
from scheduler.state import records

log = logging.getLogger("meridian.scheduler.routes")


def build_models(snapshot: fleet_mod.FleetSnapshot, deployments: Mapping[str, deployment_spec.ModelDeployment],
                 draining: Collection[str] = (), unrouted: Collection[str] = ()) -> tuple[fm.ModelRoutes, ...]:
    """Every applied deployment gets an entry (empty while it has no ready replica, so routers know
    the model and can hold its first request while it scales from zero). ``unrouted``: replicas a
    rollout keeps out of traffic (``RolloutDriver.unrouted``)."""
    by_deployment: dict[str, list[fm.RouteReplica]] = {}
    served_name: dict[str, str] = {}
    for cluster, r in snapshot.replicas():
        if r.state is not fm.ReplicaState.READY or r.replica_id in draining or r.replica_id in unrouted:
            continue
        pool = cluster.pools.get(r.pool_id)
        ident = cluster.identity
        by_deployment.setdefault(r.deployment, []).append(fm.RouteReplica(
            replica_id=r.replica_id, endpoint=r.endpoint, cloud=ident.cloud, region=ident.region,
            zone=(pool.zone if pool and pool.zone else ident.zone), state=r.state, weight=1.0, load=r.load,
            gpu_type=pool.gpu_type if pool else "", cluster_id=ident.cluster_id, revision=r.revision,
            tier=pool.tier if pool else fm.Tier.ON_DEMAND))
        served_name.setdefault(r.deployment, r.served_model_name)
    models = []
    for name in sorted(set(deployments) | set(by_deployment)):
        dep = deployments.get(name)
        replicas = tuple(sorted(by_deployment.get(name, []), key=lambda x: x.replica_id))
        if dep is not None:
            s = dep.spec
            models.append(fm.ModelRoutes(served_model_name=s.model.served_name, deployment=name, replicas=replicas,
                                         is_embedding=s.runtime.is_embedding,
                                         context_length=s.runtime.context_length or 0,
                                         max_rtt_ms=s.sla.max_rtt_ms or 0.0, ttft_p99_ms=s.sla.ttft_p99_ms,
                                         tpot_p99_ms=s.sla.tpot_p99_ms or 0.0))
        elif served_name.get(name):
            # Replicas of a deleted deployment keep serving until drained.
            models.append(fm.ModelRoutes(served_model_name=served_name[name], deployment=name, replicas=replicas))
    return tuple(sorted(models, key=lambda m: (m.served_model_name, m.deployment)))


def _without_load(models: tuple[fm.ModelRoutes, ...]) -> tuple:
    return tuple(dataclasses.replace(m, replicas=tuple(dataclasses.replace(r, load=fm.ReplicaLoad())
                                                       for r in m.replicas)) for m in models)


class RoutePublisher:
    def __init__(self, *, store: records.RoutingStore, hub: routing.RouteHub, clock: clock_mod.Clock,
                 scheduler_id: str, load_refresh_s: float, metrics: metrics_mod.SchedulerMetrics):
        self._store = store
        self._hub = hub
        self._clock = clock
        self._id = scheduler_id
        self._load_refresh_s = load_refresh_s
        self._metrics = metrics
        self._models: tuple[fm.ModelRoutes, ...] | None = None
        self._shape: tuple | None = None
        self._published_at = 0.0

    def reset(self) -> None:
        """Forget what was published (a new term publishes its first table unconditionally)."""
        self._models = self._shape = None

    async def refresh(self, models: tuple[fm.ModelRoutes, ...], fence: int) -> fm.RoutingTable | None:
        """Publish ``models`` as a new version if they changed (load-only changes: rate limited)."""
        now = self._clock.now()
        shape = _without_load(models)
        if self._models is not None:
            if models == self._models:
                return None
            if shape == self._shape and now - self._published_at < self._load_refresh_s:
                return None
        version = await self._store.next_version()
        table = fm.RoutingTable(version=version, models=models, generated_at=now, scheduler_id=self._id)
        await self._store.save(table, fence=fence)
        self._models, self._shape, self._published_at = models, shape, now
        self._hub.publish(table)
        self._metrics.routing_version.set(version)
        log.info("event=routes_published version=%d models=%d replicas=%d", version, len(models),
                 sum(len(m.replicas) for m in models))
        return table

    async def follow(self) -> fm.RoutingTable | None:
        """On a standby: take the table the leader stored, if newer than the one held."""
        table = await self._store.load()
        if table is not None and self._hub.publish(table):
            self._metrics.routing_version.set(table.version)
            return table
        return None
